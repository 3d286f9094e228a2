"""An effect that raises a ``BaseException`` of its own (neither an ``Exception``, a
``CancelledError``, nor an exit), on SQLite on disk.

Fault: the effect raises ``class Escape(BaseException)``. Before the fix the engine let it
through as if it were one of its own control-flow signals: the execute call failed with a
bare ``Escape`` naming no effect, nothing was recorded for the step, and a non-idempotent
effect's intent stayed open (its next delivery parked it in doubt, though the effect had
said how it ended).

Promise checked: it is the effect's error, recorded like any exception it raised (its type
and message, retried per its policy, a non-idempotent intent closed by the recorded
failure), so the flow sees a step failure naming the effect. The engine's own signals and
``GeneratorExit`` still pass through untouched.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from loom import EffectContext, FlowContext, Loom, Retry
from loom.errors import LoomError
from loom.kernel.cancellation import CleanupSpentSignal
from loom.kernel.context import (
    AbortSignal,
    InDoubtSignal,
    ParkSignal,
    StopSignal,
    SupersededSignal,
    SuspendSignal,
)
from loom.kernel.effects import attempt_failure
from loom.ops.replay_check import _FrontierSignal  # pyright: ignore[reportPrivateUsage]
from loom.primitives.continuation import _ContinueSignal  # pyright: ignore[reportPrivateUsage]
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.wire import ExecutionPackage
from tests.faults import harness as h
from tests.faults.audit.audit_app import app as audit_app
from tests.faults.harness import Ledger

APP = "tests.faults.audit.audit_app:app"


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setitem(os.environ, "LOOM_TEST_SIDE_FILE", str(tmp_path / "ledger.txt"))
    return Ledger(tmp_path / "ledger.txt")


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_non_idempotent_effects_base_exception_is_its_recorded_failure(
    tmp_path: Path, ledger: Ledger, kind: str
) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    runtime = Runtime(audit_app, store)
    try:
        args = {"how": "escape", "kind": kind}
        result = await runtime.start("audit.once", args, execution_id="b-1")
        assert result.status == "completed", result
        assert result.output == "caught EffectFailedError"
        history = await runtime.history("b-1")
        failed = [e for e in history if e.type == "EffectFailed"]
        assert len(failed) == 1
        error = failed[0].error  # type: ignore[attr-defined]
        assert error.type == "Escape" and error.code == "error"
        assert error.message == "an effect raised a BaseException"
        assert len(ledger.keys()) == 3  # the default policy's three attempts, each recorded
        # Every intent is closed by a recorded outcome: nothing is left in doubt.
        types = [e.type for e in history if e.type.startswith("Effect")]
        assert types[-1] == "EffectFailed" and "EffectStarted" in types
        state = await runtime.load_state("b-1")
        assert state.steps["1"].get("status") == "failed", state.steps
        again = await runtime.execute(ExecutionPackage(execution_id="b-1"))
        assert again.status == "completed" and len(ledger.keys()) == 3
    finally:
        await store.aclose()


class Halt(BaseException):
    """A ``BaseException`` subclass a library might raise (as pytest's ``Failed`` is)."""


app = Loom("base-exception")


@app.effect("halts", retry=Retry(max_attempts=2, initial_interval=0.01))
async def halts(ctx: EffectContext, _: None) -> str:
    raise Halt(f"halted on attempt {ctx.attempt}")


@app.effect("halts_once", retry=Retry(max_attempts=5, non_retryable=(Halt,)))
def halts_once(ctx: EffectContext, _: None) -> str:
    raise Halt("not to be retried")


@app.effect("group", retry=Retry(max_attempts=1))
async def group(ctx: EffectContext, _: None) -> str:
    raise BaseExceptionGroup("several", [Halt("one"), ValueError("two")])


@app.flow("uncaught")
async def uncaught(ctx: FlowContext, name: str) -> str:
    return await ctx.execute({"halts": halts, "halts_once": halts_once, "group": group}[name])


async def test_an_idempotent_effects_base_exception_fails_the_step_naming_it(
    tmp_path: Path,
) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    runtime = Runtime(app, store)
    try:
        result = await runtime.start("uncaught", "halts", execution_id="u-1")
        assert result.status == "failed", result
        assert result.error is not None and result.error["code"] == "effect_failed"
        assert "'halts'" in result.error["message"]
        assert "halted on attempt 2" in result.error["message"]
        history = await runtime.history("u-1")
        [failed] = [e for e in history if e.type == "EffectFailed"]
        assert failed.attempts == 2 and failed.error.type == "Halt"  # type: ignore[attr-defined]

        once = await runtime.start("uncaught", "halts_once", execution_id="u-2")
        assert once.status == "failed" and once.error is not None
        [failed] = [e for e in await runtime.history("u-2") if e.type == "EffectFailed"]
        assert failed.attempts == 1  # type: ignore[attr-defined]  # non_retryable honoured

        grouped = await runtime.start("uncaught", "group", execution_id="u-3")
        assert grouped.status == "failed" and grouped.error is not None
        assert grouped.error["code"] == "effect_failed" and "'group'" in grouped.error["message"]
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "signal",
    [
        SuspendSignal(),
        ParkSignal(),
        SupersededSignal(),
        StopSignal(),
        InDoubtSignal(),
        AbortSignal(LoomError("store failed")),
        CleanupSpentSignal(),
        _ContinueSignal(),
        _FrontierSignal(),
        GeneratorExit(),
        BaseExceptionGroup("signals", [SuspendSignal()]),
    ],
)
def test_the_engines_own_signals_still_pass_through(signal: BaseException) -> None:
    ectx = EffectContext("e-1", "1", "e-1:1", 1, "halts")
    with pytest.raises(type(signal)) as raised:
        attempt_failure(signal, ectx)
    assert raised.value is signal


async def test_a_cancel_of_the_task_still_unwinds() -> None:
    ectx = EffectContext("e-1", "1", "e-1:1", 1, "halts")

    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            attempt_failure(BaseExceptionGroup("cancelled", [exc]), ectx)

    with pytest.raises(BaseExceptionGroup):
        await asyncio.create_task(cancelled())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_served_worker_records_it_and_a_redelivery_runs_nothing(tmp_path: Path, kind: str):
    """The same in a real ``loom serve`` process on a SQLite file, over HTTP."""
    env = h.env_for(tmp_path, f"sqlite:///{tmp_path}/loom.db", LOOM_APP=APP)
    ledger = Ledger(tmp_path / "ledger.txt")
    with h.served(tmp_path, env) as base:
        body = {"flow": "audit.once", "input": {"how": "escape", "kind": kind}}
        first = h.call(base, "POST", "/executions", {**body, "execution_id": "w-1"})
        assert first.status == 200, first.body
        assert first.body["status"] == "completed", first.body
        assert first.body["output"] == "caught EffectFailedError"
        ran = ledger.keys()
        assert len(ran) == 3  # the default policy's three attempts
        again = h.call(base, "POST", "/execute", {"executionPackage": {"execution_id": "w-1"}})
        assert again.status == 200 and again.body["status"] == "completed", again.body
        assert ledger.keys() == ran
