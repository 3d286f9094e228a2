"""Firestore operations of the real runtime, counted at the client, and what they cost.

Runs Loom's runtime (start → claim → steps → completion) on the
Firestore emulator and counts what goes over the wire: every ``Commit`` (one write per
document written, deletes apart), every ``BatchGetDocuments`` (one read per document asked
for, found or not) and every ``RunQuery`` (one read per document returned, at least one per
query, as Firestore bills). The counters wrap the client's GAPIC calls, below the store, so
nothing the store does escapes them.

Flows: 10 and 100 sequential steps, idempotent and non-idempotent, ``strict`` and
``batched`` durability, run by the start itself (no dispatcher); and the 10-step idempotent
flow dispatched to a worker that loads and claims it (the Cloud Tasks path). Then a whole ``loom resume`` of a 200-step execution waiting on a
gate, which then runs to completion (a new client, as a new CLI process has): reads counted.

Run from the repository root (starts the emulator unless ``FIRESTORE_EMULATOR_HOST`` is set)::

    python bench/firestore_cost.py [--json results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.*, tests.procs

from google.cloud import firestore

from bench.firestore_ops import PRICE_READ, PRICE_REQUEST, PRICE_TASK, PRICE_WRITE, emulator
from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from loom_gcp.firestore import FirestoreEventStore

PROJECT = "loom-bench"


class RpcCounter:
    """Counts billed document operations of one client by wrapping its GAPIC calls."""

    def __init__(self, client: firestore.AsyncClient) -> None:
        self.ops: Counter[str] = Counter()
        api: Any = client._firestore_api  # pyright: ignore[reportPrivateUsage]
        for name in ("commit", "batch_get_documents", "run_query"):
            setattr(api, name, self._wrap(name, getattr(api, name)))

    def _wrap(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            request = kwargs.get("request")
            self.ops["rpcs"] += 1
            if name == "commit":
                writes = list(_field(request, "writes"))
                deletes = sum(1 for w in writes if _field(w, "delete"))
                self.ops["writes"] += len(writes) - deletes
                self.ops["deletes"] += deletes
                return await call(*args, **kwargs)
            if name == "batch_get_documents":
                self.ops["reads"] += len(_field(request, "documents"))
                return await call(*args, **kwargs)
            return self._query_results(await call(*args, **kwargs))

        return counted

    def _query_results(self, stream: Any) -> AsyncIterator[Any]:
        async def results() -> AsyncIterator[Any]:
            found = 0
            async for response in stream:
                found += 1 if response.document.name else 0
                yield response
            self.ops["reads"] += max(found, 1)  # a query is billed one read at least

        return results()

    def reset(self) -> None:
        """Start counting from zero."""
        self.ops.clear()


def _field(message: Any, name: str) -> Any:
    """A field of a request given as a dict or as a message."""
    if isinstance(message, dict):
        return cast("dict[str, Any]", message).get(name)
    return getattr(message, name)


def make_app(durability: str) -> Loom:
    """The benchmark's flows, with the given durability."""
    # Strict is the default: the flag is left out, so the script also runs on older
    # checkouts (``--strict-only``), for a side-by-side count.
    extra: dict[str, Any] = {} if durability == "strict" else {"durability": durability}
    app = Loom("cost", **extra)

    @app.effect("step.idem")
    async def idem(ctx: EffectContext, n: int) -> int:
        return n

    @app.effect("step.once", idempotent=False)
    async def once(ctx: EffectContext, n: int) -> int:
        return n

    @app.flow("steps")
    async def steps(ctx: FlowContext, spec: dict[str, Any]) -> int:
        effect = "step.idem" if spec["idempotent"] else "step.once"
        for i in range(spec["n"]):
            await ctx.execute(effect, i)
        return spec["n"]

    @app.flow("steps_then_gate")
    async def steps_then_gate(ctx: FlowContext, n: int) -> int:
        for i in range(n):
            await ctx.execute("step.idem", i)
        await ctx.suspend("go", "k")
        await ctx.execute("step.idem", n)
        return n

    return app


def _store(database: str) -> tuple[FirestoreEventStore, RpcCounter]:
    client = firestore.AsyncClient(project=PROJECT, database=database)
    return FirestoreEventStore(client), RpcCounter(client)


def cost_per_million(reads: int, writes: int, steps: int) -> float:
    """USD per 1M steps: documents, plus one Cloud Run request and one task per execution."""
    per_execution = reads * PRICE_READ + writes * PRICE_WRITE + PRICE_TASK + PRICE_REQUEST
    return round(per_execution / steps * 1_000_000, 2)


async def measure_flow(
    database: str, steps: int, idempotent: bool, durability: str, dispatched: bool = False
) -> dict[str, Any]:
    """One execution started and run to completion in one execute call: run by the start
    itself (no dispatcher: embedded, the CLI), or ``dispatched``: started by one process and
    executed by a worker with a store of its own (Cloud Tasks → Cloud Run)."""
    store, counter = _store(database)
    runtime = Runtime(make_app(durability), store)
    spec = {"n": steps, "idempotent": idempotent}
    if dispatched:
        started = await runtime.start("steps", spec, run=False)
        worker_store, worker_counter = _store(database)
        worker = Runtime(make_app(durability), worker_store)
        result = await worker.execute(ExecutionPackage(execution_id=started.execution_id))
        counter.ops.update(worker_counter.ops)
        await worker_store.aclose()
    else:
        result = await runtime.start("steps", spec)
    assert result.status == "completed", result
    ops = dict(counter.ops)
    await store.aclose()
    how = ", dispatched to a worker" if dispatched else ""
    return {
        "flow": f"{steps} {'idempotent' if idempotent else 'non-idempotent'} steps, "
        f"{durability}{how}",
        "steps": steps,
        "durability": durability,
        "idempotent": idempotent,
        "writes": ops.get("writes", 0),
        "reads": ops.get("reads", 0),
        "deletes": ops.get("deletes", 0),
        "rpcs": ops.get("rpcs", 0),
        "usd_per_1m_steps": cost_per_million(ops.get("reads", 0), ops.get("writes", 0), steps),
    }


async def measure_resume(database: str, steps: int, durability: str) -> dict[str, Any]:
    """What ``loom resume`` reads: a new client resumes, runs to the end, reports."""
    store, _ = _store(database)
    started = await Runtime(make_app(durability), store).start("steps_then_gate", steps)
    assert started.status == "suspended", started
    await store.aclose()
    cold, counter = _store(database)
    runtime = Runtime(make_app(durability), cold)
    await runtime.resume(started.execution_id, "go", "k", True)
    result = await runtime.result(started.execution_id)
    assert result.status == "completed", result
    ops = dict(counter.ops)
    await cold.aclose()
    return {
        "flow": f"loom resume after {steps} steps, {durability}",
        "reads": ops.get("reads", 0),
        "writes": ops.get("writes", 0),
        "rpcs": ops.get("rpcs", 0),
    }


CLI_APP = make_app("strict")  # what ``measure_cli_resume``'s ``loom`` command loads


def measure_cli_resume(database: str, steps: int) -> dict[str, Any]:
    """The ``loom resume`` command itself, in process, on a new client: what it reads.

    The command checks the gate, resumes, runs the execution to its end in process and
    prints the result; every client it builds is counted.
    """
    from click.testing import CliRunner

    from loom.cli import main as cli

    async def suspended() -> str:
        store, _ = _store(database)
        started = await Runtime(make_app("strict"), store).start("steps_then_gate", steps)
        assert started.status == "suspended", started
        await store.aclose()
        return started.execution_id

    execution_id = asyncio.run(suspended())
    counters: list[RpcCounter] = []
    build = FirestoreEventStore.from_url.__func__  # pyright: ignore[reportFunctionMemberAccess]

    def counted(cls: type[FirestoreEventStore], url: str) -> FirestoreEventStore:
        built = build(cls, url)
        counters.append(RpcCounter(built._client))  # pyright: ignore[reportPrivateUsage]
        return built

    FirestoreEventStore.from_url = classmethod(counted)  # type: ignore[method-assign]
    try:
        url = f"firestore://{PROJECT}/{database}"
        argv = ["--app", "bench.firestore_cost:CLI_APP", "--store", url]
        argv += ["resume", execution_id, "--on", "go", "--key", "k", "--payload", "true"]
        done = CliRunner().invoke(cli, argv, catch_exceptions=False)
    finally:
        FirestoreEventStore.from_url = classmethod(build)  # type: ignore[method-assign]
    assert done.exit_code == 0 and "completed" in done.output, done.output
    ops: Counter[str] = Counter()
    for counter in counters:
        ops.update(counter.ops)
    return {
        "flow": f"loom resume (the command) after {steps} steps, strict",
        "reads": ops.get("reads", 0),
        "writes": ops.get("writes", 0),
        "rpcs": ops.get("rpcs", 0),
    }


async def run(modes: tuple[str, ...] = ("strict", "batched")) -> dict[str, Any]:
    """Every pattern, in a fresh database."""
    database = f"c{uuid.uuid4().hex[:24]}"
    # A cold emulator may time out the first commit; its retry would count reads that a
    # warm Firestore never makes.
    await measure_flow(database, 1, True, "strict")
    flows = [
        await measure_flow(database, steps, idempotent, durability)
        for steps in (10, 100)
        for idempotent in (True, False)
        for durability in modes
    ]
    flows += [
        await measure_flow(database, steps, True, d, dispatched=True)
        for steps in (10, 100)
        for d in modes
    ]
    resumes = [await measure_resume(database, 200, d) for d in modes]
    return {"flows": flows, "resumes": resumes}


def markdown(results: dict[str, Any]) -> str:
    """The results as markdown tables."""
    lines = [
        "| flow | writes | reads | deletes | RPCs | USD per 1M steps |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['flow']} | {r['writes']} | {r['reads']} | {r['deletes']} | {r['rpcs']} "
        f"| {r['usd_per_1m_steps']:.2f} |"
        for r in results["flows"]
    ]
    lines += ["", "| resume | reads | writes | RPCs |", "|---|---:|---:|---:|"]
    lines += [
        f"| {r['flow']} | {r['reads']} | {r['writes']} | {r['rpcs']} |" for r in results["resumes"]
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Firestore operations of the real runtime.")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--strict-only", action="store_true", help="skip batched durability")
    args = parser.parse_args()
    with emulator():
        results = asyncio.run(run(("strict",) if args.strict_only else ("strict", "batched")))
        results["resumes"].append(measure_cli_resume(f"c{uuid.uuid4().hex[:24]}", 200))
    print(json.dumps(results, indent=2))
    print()
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
