"""The crash matrix: a worker process SIGKILLed at every point of a step, on SQLite and on
the Firestore emulator.

For each point and each kind of effect: no event lost or duplicated, a gap-free log, a
non-idempotent effect invoked at most once unless a ``not_performed`` verdict asks again,
idempotent re-invocations with the same key, and the execution either completes or parks in
doubt naming the step. Then verdicts drive each parked case to completion.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from loom.config import open_store
from loom.events import Event
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import crash_app
from tests.delivery.kit import run_loom, store_url

# point → (what the non-idempotent case must end as after recovery, invocations before it)
CASES = {
    "before_intent": ("completed", 0),
    "after_intent": ("in_doubt", 0),
    "in_effect": ("in_doubt", 1),
    "after_effect": ("in_doubt", 1),
    "after_complete": ("completed", 1),
    "before_reply": ("completed", 1),
}


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "c")


def _runtime(db: str) -> Runtime:
    return Runtime(crash_app.app, open_store(db))


def _kill_worker(db: str, side: Path, eid: str, point: str) -> int:
    if point == "in_effect":
        env = {"LOOM_TEST_DIE_IN_EFFECT": "1"}
    else:
        env = {"LOOM_CRASH_AT": f"{point}:1" if point != "before_reply" else point}
    return run_loom("tests.delivery.crash_app:app", db, side, "execute", eid, env=env)


def _invocations(side: Path) -> list[str]:
    return side.read_text().splitlines() if side.exists() else []


def _check_log(events: list[Event]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "log has a gap"
    outcomes = Counter(e.step_id for e in events if e.type in ("EffectCompleted", "EffectFailed"))
    assert all(n == 1 for n in outcomes.values()), f"a step recorded twice: {outcomes}"


async def _recover(db: str, side: Path, eid: str) -> tuple[Runtime, str]:
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    runtime = _runtime(db)
    result = await runtime.execute(ExecutionPackage(execution_id=eid))
    return runtime, result.status


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CASES))
async def test_non_idempotent_effect_is_never_silently_rerun(db: str, tmp_path: Path, point: str):
    side, eid = tmp_path / "side.txt", f"once-{point}"
    runtime = _runtime(db)
    await runtime.start("crash.once", None, execution_id=eid, run=False)
    assert _kill_worker(db, side, eid, point) == -signal.SIGKILL
    expected_status, invoked = CASES[point]
    assert len(_invocations(side)) == invoked
    _check_log(await runtime.history(eid))

    runtime, status = await _recover(db, side, eid)
    assert status == expected_status
    events = await runtime.history(eid)
    _check_log(events)
    assert len(_invocations(side)) <= 1, "the non-idempotent effect ran again"
    if status == "in_doubt":
        result = await runtime.result(eid)
        assert [(d.step_id, d.effect) for d in result.in_doubt] == [("1", "side.once")]
        # A second rebuild keeps it parked and invokes nothing.
        _, again = await _recover(db, side, eid)
        assert again == "in_doubt" and len(_invocations(side)) == invoked


@pytest.mark.slow
@pytest.mark.parametrize("verdict", ["performed", "not_performed"])
@pytest.mark.parametrize("point", ["after_intent", "in_effect", "after_effect"])
async def test_verdicts_drive_parked_cases_to_completion(
    db: str, tmp_path: Path, point: str, verdict: str
):
    side, eid = tmp_path / "side.txt", f"v-{point}-{verdict}"
    runtime = _runtime(db)
    await runtime.start("crash.once", None, execution_id=eid, run=False)
    _kill_worker(db, side, eid, point)
    runtime, status = await _recover(db, side, eid)
    assert status == "in_doubt"
    before = len(_invocations(side))
    output = f"done:{eid}:1" if verdict == "performed" else None
    result = await runtime.verdict(eid, "1", verdict, output=output, by="test")
    assert result.status == "completed"
    assert result.output == f"done:{eid}:1".upper()
    invocations = _invocations(side)
    if verdict == "performed":
        assert len(invocations) == before
    else:
        assert invocations[before:] == [f"{eid}:1 2"]  # same key, next attempt
    _check_log(await runtime.history(eid))


@pytest.mark.slow
@pytest.mark.parametrize("point", [p for p in CASES if p != "after_intent"])  # no intent record
async def test_idempotent_effect_is_reinvoked_with_the_same_key(
    db: str, tmp_path: Path, point: str
):
    side, eid = tmp_path / "side.txt", f"idem-{point}"
    runtime = _runtime(db)
    await runtime.start("crash.idempotent", None, execution_id=eid, run=False)
    assert _kill_worker(db, side, eid, point) == -signal.SIGKILL
    runtime, status = await _recover(db, side, eid)
    assert status == "completed"
    assert (await runtime.result(eid)).output == f"done:{eid}:1".upper()
    keys = {line.split()[0] for line in _invocations(side)}
    assert keys == {f"{eid}:1"}
    recorded_before_crash = point in ("after_complete", "before_reply")
    assert len(_invocations(side)) == (
        1 if recorded_before_crash else 2 if point in ("in_effect", "after_effect") else 1
    )
    _check_log(await runtime.history(eid))
