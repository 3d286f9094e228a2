"""The fast path of the commonest step (``loom.kernel.fast_step``) against the general path.

Each flow runs twice on the in-memory store with a fixed clock: once as the engine runs it,
once with the fast path switched off (so every step takes ``Session._invoke``, and a held
completion is forced through the journal's ``durable_point``). The stored
events (as JSON, attempt durations aside: they are measured), the flow's result and the crash
points reached, in order, must be the same. The other tests pin which steps may take the
fast path at all: anything uncommon takes the general path.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom, Retry, crash, telemetry
from loom.blobs import InMemoryBlobStore
from loom.events import event_to_json
from loom.kernel import fast_step, steps
from loom.kernel.session import Session
from loom.kernel.steps import EffectSteps
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore


class Order(BaseModel):
    sku: str
    qty: int


@pytest.fixture(autouse=True)
def _no_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paths compared here are those of a process with no tracer provider; the
    telemetry tests install one for their whole process, which may be this one."""
    monkeypatch.setattr(telemetry, "_tracing_on", False)
    monkeypatch.setattr(telemetry, "refresh", lambda: False)


def _app() -> Loom:
    app = Loom("fast")
    tries: dict[str, int] = {}

    @app.effect("double")
    async def double(ctx: EffectContext, n: int) -> int:
        return 2 * n

    @app.effect("obj")
    async def obj(ctx: EffectContext, n: int) -> dict[str, Any]:
        return {"n": n, "tag": "x" * n, "$blob": None} if n == 3 else {"$blob": "mine"}

    @app.effect("flaky", retry=Retry(max_attempts=3, initial_interval=0.001, jitter=0))
    async def flaky(ctx: EffectContext, n: int) -> int:
        tries[ctx.idempotency_key] = tries.get(ctx.idempotency_key, 0) + 1
        if tries[ctx.idempotency_key] < 2:
            raise ValueError(f"attempt {ctx.attempt}")
        return n

    @app.effect("broken", retry=Retry(max_attempts=2, initial_interval=0.001, jitter=0))
    async def broken(ctx: EffectContext, n: int) -> int:
        raise RuntimeError(f"no {n}")

    @app.effect("nan")
    async def nan(ctx: EffectContext, n: int) -> float:
        return math.nan

    @app.effect("big")
    async def big(ctx: EffectContext, n: int) -> str:
        return "y" * n

    @app.effect("order")
    async def order(ctx: EffectContext, o: Order) -> int:
        return o.qty

    @app.flow("mix")
    async def mix(ctx: FlowContext, n: int) -> list[Any]:
        out: list[Any] = []
        for i in range(n):
            out.append(await ctx.execute(double, i))
        out.append(await ctx.execute(obj, 3))
        out.append(await ctx.execute(obj, 1))
        out.append(await ctx.execute(flaky, 7))
        out.append(await ctx.execute("big", 5000))  # over the inline threshold: a blob
        out.append(await ctx.execute(order, {"sku": "a", "qty": 2}))
        for name, arg in (("broken", 1), ("nan", 1), ("order", {"sku": "a"})):
            try:
                await ctx.execute(name, arg)
            except Exception as exc:
                out.append(f"{type(exc).__name__}: {exc}")
        return out

    return app


async def _run(
    monkeypatch: pytest.MonkeyPatch, fast: bool, ticking: bool = False
) -> tuple[Any, list[Any], list[Any]]:
    from loom.kernel import (
        durability,  # (after ``loom.kernel.steps``: imported first, it meets a cycle)
    )

    if not fast:

        def never(*_: object) -> bool:
            return False

        def forced(session: EffectSteps) -> Any:  # ``before_effect`` without its shortcut
            held = (
                isinstance(session.journal, durability.StrictJournal) and session.journal.unforced
            )
            return durability.force(session) if held else durability.READY

        monkeypatch.setattr(fast_step, "applies", never)
        monkeypatch.setattr(steps, "before_effect", forced)
    points: list[tuple[str, str | None]] = []

    def point(name: str, step_id: str | None = None) -> None:
        points.append((name, step_id))

    monkeypatch.setattr(crash, "point", point)
    monkeypatch.setattr(crash, "ARMED", True)  # (hot paths call ``point`` only when armed)
    store = InMemoryEventStore()
    ticks = itertools.count()
    # A ticking clock with a short lease: claim extensions fall due between steps, and the
    # recorded times show every read of the clock.
    clock = (lambda: 1_000.0 + next(ticks) / 2) if ticking else (lambda: 1_000.0)
    rt = Runtime(_app(), store, clock=clock, blobs=InMemoryBlobStore(), blob_threshold=4096)
    if ticking:
        rt.claim_ttl = 4.0
    result = await rt.start("mix", 4, execution_id="e1")
    events: list[dict[str, Any]] = []
    for event in await store.read("e1"):
        data = json.loads(event_to_json(event))
        data.pop("duration_s", None)  # (measured)
        data.pop("holder", None)  # (one per runtime)
        events.append(data)
    return (result.status, result.output, result.error), events, points


async def test_the_fast_path_stores_and_returns_what_the_general_path_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: list[str] = []
    real = fast_step.invoke

    def spy(session: EffectSteps, step_id: str, *args: Any) -> Any:
        taken.append(step_id)
        return real(session, step_id, *args)

    monkeypatch.setattr(fast_step, "invoke", spy)
    fast = await _run(monkeypatch, fast=True)
    assert len(taken) == 12  # every step of ``mix`` is one the fast path applies to
    with monkeypatch.context() as m:
        general = await _run(m, fast=False)
    assert len(taken) == 12  # (switched off: the general path ran them all)
    assert fast == general
    result, events, points = fast
    assert result[0] == "completed"
    output = result[1]
    assert output[:7] == [0, 2, 4, 6, {"n": 3, "tag": "xxx", "$blob": None}, {"$blob": "mine"}, 7]
    assert output[7:9] == ["y" * 5000, 2]
    assert [o.split(":")[0] for o in output[9:]] == ["EffectFailedError"] * 3
    outputs = [e.get("output") for e in events if e["type"] == "EffectCompleted"]
    assert {"$loom.value": {"$blob": "mine"}} in outputs  # escaped, as the general path does
    blobs: list[Any] = [o for o in outputs if isinstance(o, dict) and "$blob" in o and "n" not in o]
    assert len(blobs) == 1  # the big output is offloaded, as the general path does
    assert [e["type"] for e in events].count("EffectRetried") == 2  # flaky, broken
    assert ("held", "4") in points and ("after_complete", "4") in points


async def test_both_paths_read_the_clock_alike_as_claim_extensions_fall_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = await _run(monkeypatch, fast=True, ticking=True)
    with monkeypatch.context() as m:
        general = await _run(m, fast=False, ticking=True)
    assert fast == general
    result, events, _ = fast
    assert result[0] == "completed"
    assert [e["type"] for e in events].count("ExecutionClaimed") >= 3  # extensions were due


def _defn(**options: Any) -> Any:
    async def run(ctx: EffectContext, n: int) -> int:
        return n

    return Loom("opts").effect("e", **options)(run)


class _Journal:
    def __init__(self, budgets: dict[str, float], last_seq: int) -> None:
        self.state = type("S", (), {"budgets": budgets, "last_seq": last_seq})()


class _Session:
    def __init__(self, budgets: dict[str, float] | None = None, last_seq: int = 5) -> None:
        self.journal = _Journal(budgets or {}, last_seq)
        self.max_events = 100


def test_only_the_first_attempt_of_a_plain_idempotent_async_effect_applies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session: Any = _Session()
    plain = _defn()
    assert fast_step.applies(session, plain, 1)
    assert not fast_step.applies(session, plain, 2)  # a retry after a crash: made durable first
    assert not fast_step.applies(session, _defn(idempotent=False), 1)  # an intent record
    assert not fast_step.applies(session, _defn(timeout=5.0), 1)
    sync = Loom("s").effect("s")(lambda ctx, n: n)  # pyright: ignore  # runs in a thread
    assert not fast_step.applies(session, sync, 1)
    budgeted: Any = _Session({"max_effect_calls": 3})
    assert not fast_step.applies(budgeted, plain, 1)  # a budget
    full: Any = _Session(last_seq=100)
    assert not fast_step.applies(full, plain, 1)  # a full log: the slow path stops the flow
    monkeypatch.setattr(telemetry, "_tracing_on", True)  # (as ``refresh`` sets it)
    assert not fast_step.applies(session, plain, 1)  # a step span


async def test_uncommon_steps_take_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    app = Loom("general")

    @app.effect("pay", idempotent=False)
    async def pay(ctx: EffectContext, n: int) -> int:
        return n

    @app.effect("slow", timeout=5.0)
    async def slow(ctx: EffectContext, n: int) -> int:
        return n

    @app.effect("sync")
    def sync(ctx: EffectContext, n: int) -> int:
        return n

    @app.flow("f")
    async def f(ctx: FlowContext, n: int) -> int:
        return await ctx.execute(pay, n) + await ctx.execute(slow, n) + await ctx.execute(sync, n)

    general: list[str] = []
    real = Session._invoke  # pyright: ignore[reportPrivateUsage]

    def spy(self: Session, step_id: str, *args: Any) -> Any:
        general.append(step_id)
        return real(self, step_id, *args)

    monkeypatch.setattr(Session, "_invoke", spy)
    result = await Runtime(app, InMemoryEventStore()).start("f", 2, execution_id="g1")
    assert result.output == 6
    assert general == ["1", "2", "3"]
