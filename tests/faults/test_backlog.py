"""``loom serve`` listens before it catches up on its backlog, and stays responsive."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from loom.events import ExecutionStarted
from loom.store.sqlite import SqliteEventStore
from tests import procs
from tests.faults import harness as h

pytestmark = pytest.mark.slow

BACKLOG = 100
NAP = 0.1  # seconds per execution: the backlog takes BACKLOG * NAP = 10 s to run


async def _leave_running(db: Path) -> None:
    """Executions a previous worker left ``running`` (started, never executed)."""
    store = SqliteEventStore(db)
    for n in range(BACKLOG):
        await store.create(ExecutionStarted(execution_id=f"b-{n}", flow="fault.slow", input=NAP))
    await store.aclose()


def test_serve_answers_health_before_the_backlog_is_done(tmp_path: Path) -> None:
    db = tmp_path / "db" / "loom.db"
    asyncio.run(_leave_running(db))
    env = h.env_for(tmp_path, f"sqlite:///{db}")
    port = procs.free_port()
    argv = [sys.executable, "-m", "loom", "serve", "--port", str(port)]
    started = time.monotonic()
    server = procs.start("loom-backlog", argv, port=port, log_path=tmp_path / "s.log", env=env)
    try:
        procs.wait_http_ready(server, "/health", timeout=30)
        ready_after = time.monotonic() - started
        base = f"http://{server.host}"
        # Still catching up: a read of one backlog item answers at once.
        view = h.call(base, "GET", f"/executions/b-{BACKLOG - 1}?history=false")
        assert view.status == 200 and view.seconds < 1.5, (view.status, view.seconds)
        assert ready_after < BACKLOG * NAP / 2, ready_after
        _wait_all_completed(base, timeout=120)
    finally:
        procs.stop(server)


def _wait_all_completed(base: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = [f"b-{n}" for n in range(BACKLOG)]
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} still not completed"
        answer = h.call(base, "GET", f"/executions/{pending[0]}?history=false")
        if answer.body["execution"]["status"] == "completed":
            pending.pop(0)
        else:
            time.sleep(0.2)
