"""The crash matrix of strict durability's hold window, on SQLite and the Firestore emulator.

A strict session holds an idempotent step's completion until the next effect is invoked or
the next other event is appended. The worker is SIGKILLed in that window (``held:N``) and
just after the completion became durable (``after_complete:N``), in a real child process.
After a restart, a held step is invoked again with the same key, the execution ends exactly
once, and the non-idempotent step is never run twice.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from loom.config import open_store
from loom.events import Event
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import crash_app
from tests.delivery.kit import assert_each_outcome_once, invocations_per_step, run_loom, store_url

# Flow ``crash.held``: steps 1 and 2 idempotent, 3 not, 4 an idempotent tail.
# crash point → (completions durable at the crash, status after recovery, invocations per
# step of the effects that count them: 1, 2 and 3)
CASES = {
    "held:1": ([], "completed", {"1": 2, "2": 1, "3": 1}),
    "after_complete:1": (["1"], "completed", {"1": 1, "2": 1, "3": 1}),
    "held:2": (["1"], "completed", {"1": 1, "2": 2, "3": 1}),
    "after_complete:2": (["1", "2"], "completed", {"1": 1, "2": 1, "3": 1}),
    "after_intent:3": (["1", "2"], "in_doubt", {"1": 1, "2": 1}),
    "held:4": (["1", "2", "3"], "completed", {"1": 1, "2": 1, "3": 1}),
    "after_complete:4": (["1", "2", "3", "4"], "completed", {"1": 1, "2": 1, "3": 1}),
    "before_reply": (["1", "2", "3", "4"], "completed", {"1": 1, "2": 1, "3": 1}),
}


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "h")


def _completed(events: list[Event]) -> list[str]:
    return [e.step_id for e in events if e.type == "EffectCompleted"]


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CASES))
async def test_a_held_step_is_reinvoked_with_its_key_and_the_flow_ends_once(
    db: str, tmp_path: Path, point: str
):
    side, eid = tmp_path / "side.txt", f"held-{point.replace(':', '-')}"
    runtime = Runtime(crash_app.app, open_store(db))
    await runtime.start("crash.held", None, execution_id=eid, run=False)
    env = {"LOOM_CRASH_AT": point}
    assert run_loom("tests.delivery.crash_app:app", db, side, "execute", eid, env=env) == (
        -signal.SIGKILL
    )
    durable, status, invocations = CASES[point]
    before = await runtime.history(eid)
    assert before[1].type == "ExecutionClaimed"  # a strict claim is never held
    assert _completed(before) == durable

    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    recovered = Runtime(crash_app.app, open_store(db))
    result = await recovered.execute(ExecutionPackage(execution_id=eid))
    assert result.status == status
    assert invocations_per_step(side, eid) == invocations
    events = await recovered.history(eid)
    assert_each_outcome_once(events)
    ends = [e for e in events if e.type in ("ExecutionCompleted", "ExecutionFailed")]
    if status == "completed":
        assert len(ends) == 1 and result.output == f"done:{eid}:3".upper()
    else:
        assert ends == [] and [d.step_id for d in result.in_doubt] == ["3"]
