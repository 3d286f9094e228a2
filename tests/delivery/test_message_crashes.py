"""Messages across worker deaths: a process SIGKILLed at every point of a send, and a
receiver killed after taking a message, on SQLite and on the Firestore emulator.

After recovery no message is lost or doubled: the receiver's log holds each message once
(keyed by the sender's step), it takes them in order, and its effects ran once each.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from loom.config import open_store
from loom.crash import MESSAGE_POINTS
from loom.events import Event
from loom.primitives.messages import deliver
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.delivery import message_app
from tests.delivery.kit import run_loom, store_url

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "firestore"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a child process can open too."""
    return store_url(request, tmp_path, "m")


def _loom(db: str, side: Path, crash_at: str, *args: str) -> int:
    """Run ``loom ARGS`` in a child process that SIGKILLs itself at ``crash_at``."""
    app = "tests.delivery.message_app:app"
    return run_loom(app, db, side, *args, timeout=120, env={"LOOM_CRASH_AT": crash_at})


def _received(events: list[Event]) -> list[str]:
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "log has a gap"
    return [e.message_id for e in events if e.type == "MessageReceived"]


def _notes(side: Path) -> list[str]:
    return side.read_text().splitlines() if side.exists() else []


@pytest.mark.parametrize("point", MESSAGE_POINTS)
async def test_a_sender_killed_around_a_send_delivers_each_message_once(
    db: str, tmp_path: Path, point: str
) -> None:
    side, to, sender = tmp_path / "side.txt", f"rx-{point}", f"tx-{point}"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    runtime = Runtime(message_app.app, open_store(db))
    await runtime.start("msg.receiver", None, execution_id=to)
    await runtime.start("msg.sender", to, execution_id=sender, run=False)
    assert _loom(db, side, f"{point}:2", "execute", sender) == -signal.SIGKILL

    done = await runtime.execute(ExecutionPackage(execution_id=sender))  # the redelivery
    assert done.status == "completed"
    assert _received(await runtime.history(to)) == [f"{sender}:1", f"{sender}:2", f"{sender}:3"]
    result = await runtime.result(to)
    assert (result.status, result.output) == ("completed", [1, 2, 3])
    assert sorted(n.split()[1] for n in _notes(side)) == ["1", "2", "3"]


async def test_a_receiver_killed_after_taking_a_message_takes_it_again_not_the_next(
    db: str, tmp_path: Path
) -> None:
    side, to = tmp_path / "side.txt", "rx-killed"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    runtime = Runtime(message_app.app, open_store(db))
    await runtime.start("msg.receiver", None, execution_id=to)
    await runtime.send(to, "cmd", 1, message_id="m1")
    # The child delivers message 2 and runs the receiver, which dies once it noted it.
    code = _loom(db, side, "after_effect:4", "send", to, "cmd", "2", "--id", "m2")
    assert code == -signal.SIGKILL
    assert _notes(side) == [f"{to}:2 1", f"{to}:4 2"]
    await runtime.send(to, "cmd", 2, message_id="m2")  # the caller retries: a no-op
    await runtime.execute(ExecutionPackage(execution_id=to))  # the dead worker's claim is void
    await runtime.send(to, "cmd", 3, message_id="m3")
    result = await runtime.result(to)
    assert (result.status, result.output) == ("completed", [1, 2, 3])
    assert _received(await runtime.history(to)) == ["m1", "m2", "m3"]
    assert _notes(side) == [f"{to}:2 1", f"{to}:4 2", f"{to}:4 2", f"{to}:6 3"]


async def test_a_worker_killed_right_after_continuing_leaves_one_next_run(
    db: str, tmp_path: Path
) -> None:
    side, eid = tmp_path / "side.txt", "counter-killed"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(side)
    runtime = Runtime(message_app.app, open_store(db))
    await runtime.start("msg.counter", 0, execution_id=eid, run=False)
    for n in (1, 2, 3):  # delivered without running it: the child process will
        await deliver(runtime, eid, "add", n, message_id=f"a{n}")
    assert _loom(db, side, "after_continue", "execute", eid) == -signal.SIGKILL
    state = await runtime.load_state(eid)
    assert (state.run, state.status, state.input) == (2, "running", 3)
    again = await runtime.execute(ExecutionPackage(execution_id=eid))  # the redelivery
    assert again.status == "suspended"  # run 2 took the carried message 3, waits for more
    await runtime.execute(ExecutionPackage(execution_id=eid))  # a duplicate: nothing to do
    await runtime.send(eid, "add", "stop")
    result = await runtime.result(eid)
    assert (result.status, result.output) == ("completed", 6)
    events = await runtime.history(eid)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.run for e in events if e.type == "ExecutionContinued"] == [2]
    assert sorted(n.split()[1] for n in _notes(side)) == ["1", "2", "3"]
