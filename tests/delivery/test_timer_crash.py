"""A worker SIGKILLed in the middle of an ``asyncio.wait_for`` around a step.

The worker process (``loom execute``, SQLite on disk) sees the deadline fire while the step
runs, moves on, and dies before the step returns. The recovery replays the recorded firing at
its place — the flow times out again, whatever the clock says now — and the step keeps its
delivery contract: a non-idempotent one is never run again on its own (it parks in doubt
until a verdict), an idempotent one is run again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from loom.config import open_store
from loom.kernel.loop_timers import LOOP_TIMER
from loom.runtime import Runtime
from loom.testing import replay
from loom.wire import ExecutionPackage
from tests.delivery import timer_crash_app
from tests.delivery.kit import run_loom


def _worker_dies(db: str, side: Path, eid: str) -> int:
    app = "tests.delivery.timer_crash_app:app"
    return run_loom(app, db, side, "execute", eid, env={"LOOM_TEST_KILL_IN_EFFECT": "1"})


async def _killed_after_the_deadline(tmp_path: Path, effect: str) -> tuple[Runtime, Path]:
    db, side = f"sqlite:///{tmp_path}/loom.db", tmp_path / "side.txt"
    runtime = Runtime(timer_crash_app.app, open_store(db))
    await runtime.start("guarded", effect, execution_id="w", run=False)
    assert _worker_dies(db, side, "w") == -signal.SIGKILL
    types = [e.type for e in await runtime.history("w")]
    fired = [e for e in await runtime.history("w") if getattr(e, "on", None) == LOOP_TIMER]
    assert len(fired) == 1 and "ExecutionCompleted" not in types  # fired, then the kill
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    return runtime, side


async def test_a_non_idempotent_step_cut_short_by_a_deadline_parks_in_doubt_after_a_kill(
    tmp_path: Path,
):
    runtime, side = await _killed_after_the_deadline(tmp_path, "slow.once")
    parked = await runtime.execute(ExecutionPackage(execution_id="w"))
    assert parked.status == "in_doubt"  # never re-run on its own
    [step] = [d.step_id for d in parked.in_doubt]
    done = await runtime.verdict("w", step, "performed", output="charged")
    assert (done.status, done.output) == ("completed", "TIMED OUT")  # as the live flow saw
    assert side.read_text().split() == [f"w:{step}"]  # invoked once, across the kill
    assert (await replay(timer_crash_app.app, await runtime.history("w"))).output == "TIMED OUT"


async def test_an_idempotent_step_cut_short_by_a_deadline_runs_again_after_a_kill(
    tmp_path: Path,
):
    runtime, side = await _killed_after_the_deadline(tmp_path, "slow.again")
    done = await runtime.execute(ExecutionPackage(execution_id="w"))
    assert (done.status, done.output) == ("completed", "TIMED OUT")  # the firing replayed
    first, again = side.read_text().split()
    assert first == again  # at least once, with the same key
    history = await runtime.history("w")
    assert (await replay(timer_crash_app.app, history)).output == "TIMED OUT"
