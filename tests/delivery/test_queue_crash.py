"""Queued starts under SIGKILL, on SQLite and the Firestore emulator.

* A worker dies right after it held a start's deduplication id, before the start was
  written (``after_dedup_held``, the riskiest await of a deduplicated start): nothing was
  started; the retried start (the same execution id) goes through and runs once; another
  start with the id is refused while the holder may still write its start, and takes the id
  over once that hold is stale.
* A worker dies after the claim that recorded the dequeue (``after_complete:1``, the step
  done): the redelivery runs the rest, records no second dequeue, and keeps the deadline
  the first one set.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from loom import events as ev
from loom.config import open_store
from loom.errors import QueueDeduplicatedError, UnknownExecutionError
from loom.primitives.queue_options import STALE_HOLD
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.testing import FakeClock
from loom.wire import ExecutionPackage
from tests.delivery.kit import run_loom, store_url
from tests.flowcontrol import options_app

APP = "tests.flowcontrol.options_app:app"


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "q")


def _start_and_die(db: str, side: Path, point: str, eid: str, *queue: str) -> int:
    # (--wait: on Firestore a queued start runs once the next admit pass grants it)
    args = ("start", "job", "--input", f'{{"name": "{eid}"}}', "--id", eid, *queue, "--wait", "5")
    return run_loom(APP, db, side, *args, env={"LOOM_CRASH_AT": point})


async def test_a_start_killed_holding_its_deduplication_id(db: str, tmp_path: Path):
    options_app.reset()
    opts = ("--queue", "dedup", "--dedup-id", "welcome")
    assert _start_and_die(db, tmp_path / "side", "after_dedup_held", "a", *opts) == -signal.SIGKILL
    clock = FakeClock(time.time())
    rt = Runtime(options_app.app, open_store(db), clock=clock)
    try:
        with pytest.raises(UnknownExecutionError):
            await rt.store.summary("a")  # nothing was started
        q = QueueRef("dedup", deduplication_id="welcome")
        with pytest.raises(QueueDeduplicatedError):  # "a" may still write its start
            await rt.start("job", {"name": "b"}, execution_id="b", queue=q, run=False)
        retried = await rt.start("job", {"name": "a"}, execution_id="a", queue=q, run=False)
        assert retried.execution_id == "a"  # the retried start is the holder's own
        await rt.execute(ExecutionPackage(execution_id="a"))
        assert (await rt.result("a")).status == "completed"
        assert [n for n, _ in options_app.STARTED].count("a") == 1
        # A start that died holding an id nobody retries: stale after a while, taken over.
        assert _start_and_die(db, tmp_path / "side", "after_dedup_held", "c", "--queue",
                              "dedup", "--dedup-id", "e") == -signal.SIGKILL  # fmt: skip
        other = QueueRef("dedup", deduplication_id="e")
        with pytest.raises(QueueDeduplicatedError):
            await rt.start("job", {"name": "d"}, execution_id="d", queue=other, run=False)
        clock.now = time.time() + STALE_HOLD + 1  # (the hold was taken on the real clock)
        await rt.start("job", {"name": "d"}, execution_id="d", queue=other, run=False)
        assert (await rt.store.summary("d")).status == "running"
    finally:
        await rt.store.aclose()


async def test_a_worker_killed_after_the_dequeue(db: str, tmp_path: Path):
    opts = ("--queue", "one", "--queue-timeout", "600", "--priority", "4")
    assert _start_and_die(db, tmp_path / "side", "after_complete:1", "q", *opts) == -signal.SIGKILL
    rt = Runtime(options_app.app, open_store(db))
    try:
        before = await rt.history("q")
        assert [e.type for e in before][:3] == [
            "ExecutionStarted",
            "ExecutionClaimed",
            "ExecutionDequeued",
        ]
        await rt.execute(ExecutionPackage(execution_id="q"))
        after = await rt.history("q")
        assert (await rt.result("q")).status == "completed"
        dequeues = [e for e in after if isinstance(e, ev.ExecutionDequeued)]
        assert len(dequeues) == 1 and dequeues[0] == before[2]
        assert (await rt.load_state("q")).deadline == dequeues[0].deadline
        assert [e.type for e in after].count("EffectCompleted") == 1
    finally:
        await rt.store.aclose()
