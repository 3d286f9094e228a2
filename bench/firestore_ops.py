"""Firestore document operations per step, and what 1M steps cost at list price.

Replays the append pattern the runtime produces against the Firestore emulator and reads the
store's own counters (``FirestoreEventStore.ops``), which count what Firestore bills:

* per execution: ``create`` (ExecutionStarted);
* per ``execute`` call: ``load``, then an ``ExecutionClaimed`` append;
* per idempotent step: one ``EffectCompleted`` append; per non-idempotent step: an
  ``EffectStarted`` append, then an ``EffectCompleted`` append;
* at the end: ``ExecutionCompleted`` with ``StatusChange("completed")``;
* resume: a cold ``load`` of a suspended execution that has a snapshot and one new event.

Run from the repository root (starts the emulator unless ``FIRESTORE_EMULATOR_HOST`` is set)::

    python bench/firestore_ops.py [--json results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.procs

from tests import procs

from loom.events import (
    EffectCompleted,
    EffectStarted,
    Event,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionResumed,
    ExecutionStarted,
    ExecutionSuspended,
)
from loom.store import AppendRequest, Snapshot, StatusChange
from loom_gcp.firestore import FirestoreEventStore

# List prices (USD): Firestore per 100K documents; Cloud Tasks and Cloud Run per 1M.
PRICE_READ = 0.03 / 100_000
PRICE_WRITE = 0.09 / 100_000
PRICE_TASK = 0.40 / 1_000_000
PRICE_REQUEST = 0.40 / 1_000_000
PROJECT = "loom-bench"


class Flow:
    """Appends one execution's events in order, the way the runtime does."""

    def __init__(self, store: FirestoreEventStore, execution_id: str) -> None:
        self.store = store
        self.eid = execution_id
        self.last = 0

    async def append(self, event: Event, status: StatusChange | None = None) -> None:
        event = event.model_copy(update={"seq": self.last + 1, "at": 1.0})
        request = AppendRequest(self.eid, self.last, [event], status)
        self.last = await self.store.append(request)

    async def start(self) -> None:
        await self.store.create(ExecutionStarted(execution_id=self.eid, flow="bench", input={}))
        self.last = 1

    async def execute_call(self) -> None:
        self.last = (await self.store.load(self.eid)).last_seq
        await self.append(ExecutionClaimed(holder="worker", until=60.0))

    async def step(self, n: int, *, idempotent: bool) -> None:
        key = f"{self.eid}:{n}"
        if not idempotent:
            await self.append(EffectStarted(step_id=str(n), effect="fx", idempotency_key=key))
        await self.append(EffectCompleted(step_id=str(n), effect="fx", output={"n": n}))


async def measure_flow(
    store: FirestoreEventStore, steps: int, *, idempotent: bool
) -> dict[str, Any]:
    """One execution of ``steps`` steps in one execute call."""
    store.reset_ops()
    flow = Flow(store, f"run-{uuid.uuid4().hex[:8]}")
    await flow.start()
    await flow.execute_call()
    for n in range(steps):
        await flow.step(n, idempotent=idempotent)
    await flow.append(ExecutionCompleted(output={"ok": True}), StatusChange("completed"))
    ops = store.ops
    marginal = 1 if idempotent else 2
    return {
        "flow": f"{steps} {'idempotent' if idempotent else 'non-idempotent'} steps",
        "steps": steps,
        "execute_calls": 1,
        "reads": ops["reads"],
        "writes": ops["writes"],
        "writes_per_step": ops["writes"] / steps,
        "marginal_writes_per_step": marginal,
        "reads_per_step": ops["reads"] / steps,
        "usd_per_1m_steps": cost_per_million(ops["reads"], ops["writes"], steps, calls=1),
    }


async def measure_resume(database: str, steps: int) -> dict[str, Any]:
    """Reads of a cold ``load`` (a new instance) of a suspended execution with a snapshot."""
    store = FirestoreEventStore(project=PROJECT, database=database)
    flow = Flow(store, f"resume-{uuid.uuid4().hex[:8]}")
    await flow.start()
    await flow.execute_call()
    for n in range(steps):
        await flow.step(n, idempotent=True)
    gate = ExecutionSuspended(step_id="gate", on="approval", correlation_key="k")
    await flow.append(gate, StatusChange("suspended"))
    await store.save_snapshot(flow.eid, Snapshot(flow.last, json.dumps({"steps": steps})))
    await flow.append(ExecutionResumed(on="approval", correlation_key="k", payload=True))
    await store.aclose()
    cold = FirestoreEventStore(project=PROJECT, database=database)
    loaded = await cold.load(flow.eid)
    assert loaded.snapshot is not None and len(loaded.events) == 1
    reads = cold.ops["reads"]
    await cold.aclose()
    return {"flow": f"resume after {steps} steps", "steps": steps, "reads_per_resume": reads}


def cost_per_million(reads: int, writes: int, steps: int, *, calls: int) -> float:
    """USD per 1M steps: documents, plus one Cloud Run request and one task per call."""
    per_step = reads * PRICE_READ + writes * PRICE_WRITE + calls * (PRICE_TASK + PRICE_REQUEST)
    return round(per_step / steps * 1_000_000, 2)


def markdown(rows: list[dict[str, Any]], resumes: list[dict[str, Any]]) -> str:
    """The results as a markdown table."""
    lines = [
        "| flow | writes | reads | writes/step | marginal writes/step | USD per 1M steps |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['flow']} | {r['writes']} | {r['reads']} | {r['writes_per_step']:.2f} "
            f"| {r['marginal_writes_per_step']} | {r['usd_per_1m_steps']:.2f} |"
        )
    lines += ["", "| resume | document reads |", "|---|---:|"]
    lines += [f"| {r['flow']} | {r['reads_per_resume']} |" for r in resumes]
    return "\n".join(lines)


@contextlib.contextmanager
def emulator() -> Generator[None]:
    """Use ``FIRESTORE_EMULATOR_HOST`` if set, else run the emulator for the benchmark."""
    os.environ.update(procs.OFFLINE_ENV)
    if os.environ.get("FIRESTORE_EMULATOR_HOST"):
        yield
        return
    gcloud, java = shutil.which("gcloud"), shutil.which("java")
    if gcloud is None or java is None:
        sys.exit("needs gcloud and java for the Firestore emulator")
    sdk = subprocess.run(
        [gcloud, "info", "--format=value(installation.sdk_root)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    jar = Path(sdk) / "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
    port = procs.free_port()
    argv = [java, "-Duser.language=en", "-cp", str(jar),
            "com.google.cloud.datastore.emulator.firestore.CloudFirestore", "start",
            f"--host={procs.LOOPBACK}", f"--port={port}"]  # fmt: skip
    with (
        tempfile.TemporaryDirectory() as tmp,
        procs.running(
            "firestore-emulator", argv, port=port, log_path=Path(tmp) / "emulator.log"
        ) as server,
    ):
        os.environ["FIRESTORE_EMULATOR_HOST"] = server.host
        yield


async def run() -> dict[str, Any]:
    """Every pattern, each execution in a fresh database."""
    database = f"b{uuid.uuid4().hex[:24]}"
    store = FirestoreEventStore(project=PROJECT, database=database)
    rows = [
        await measure_flow(store, steps, idempotent=idem)
        for steps in (10, 100)
        for idem in (True, False)
    ]
    await store.aclose()
    resumes = [await measure_resume(database, steps) for steps in (10, 100)]
    return {"flows": rows, "resumes": resumes}


def main() -> None:
    parser = argparse.ArgumentParser(description="Firestore operations per step and cost.")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    with emulator():
        results = asyncio.run(run())
    text = json.dumps(results, indent=2)
    print(text)
    print()
    print(markdown(results["flows"], results["resumes"]))
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
