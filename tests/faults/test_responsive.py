"""A served worker stays responsive while one execution waits on a locked SQLite file.

Both ways of serving (``loom serve`` and the functions-framework ``worker`` target) run as
real processes on a SQLite file with the default 30 s busy timeout; a second OS process holds
the write lock. While a start waits for that lock, unrelated requests (a read of another
execution, ``/live``) answer within about a second; once the lock is let go, the waiting
start finishes normally.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import procs
from tests.faults import harness as h
from tests.functions.conftest import start_worker

pytestmark = pytest.mark.slow

RESPONSIVE = 1.5  # seconds: "about a second", with a margin for a busy machine
BUSY_TIMEOUT = 30.0  # the store's default: the start waits this long at most


@contextlib.contextmanager
def serving(kind: str, tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    if kind == "serve":
        with h.served(tmp_path, env) as base:
            yield base
        return
    server = start_worker("worker", env, tmp_path)
    try:
        yield f"http://{server.host}"
    finally:
        procs.stop(server)


@pytest.mark.parametrize("kind", ["serve", "functions-framework"])
def test_unrelated_requests_answer_while_a_start_waits_on_the_lock(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "db" / "loom.db"
    env = h.env_for(tmp_path, f"sqlite:///{db}")
    env.pop("LOOM_SQLITE_BUSY_TIMEOUT", None)
    with serving(kind, tmp_path, env) as base:
        other = h.call(base, "POST", "/executions", {"flow": "fault.quick", "input": "other"})
        assert other.status == 200, other.body
        body = {"flow": "fault.quick", "input": "waits", "execution_id": "waiting"}
        with h.lock_holder(db) as holder, ThreadPoolExecutor(1) as pool:
            pending = pool.submit(h.call, base, "POST", "/executions", body, BUSY_TIMEOUT + 10)
            time.sleep(1.0)  # the start is now blocked on the lock
            assert not pending.done()
            quick = [
                h.call(base, "GET", f"/executions/{other.body['execution_id']}?history=false"),
                h.call(base, "GET", "/live"),
            ]
            assert [a.status for a in quick] == [200, 200], [a.body for a in quick]
            assert max(a.seconds for a in quick) < RESPONSIVE, [a.seconds for a in quick]
            holder.kill()  # the other process dies: its lock goes with it
            holder.wait(timeout=10)
            waited = pending.result(timeout=BUSY_TIMEOUT + 10)
        assert waited.status == 200 and waited.body["status"] == "completed", waited.body
        assert waited.seconds < BUSY_TIMEOUT, waited.seconds
