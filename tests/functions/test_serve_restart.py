"""``loom serve`` re-arms its timers when it starts: a restart while timers are pending.

A real server process on SQLite starts executions that sleep on durable timers and is
stopped before they fall due. A new server on the same store must run them when they fall
due (``InProcessDispatcher.recover()``), within a bound: without the re-arm they would sleep
forever, and this test fails at its bound rather than at the suite's timeout.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.functions.conftest import REPO, SECRET

pytestmark = pytest.mark.slow

APP = "tests.functions.timer_app:app"


def _serve(store: str, log: Path) -> procs.Server:
    port = procs.free_port()
    argv = [sys.executable, "-m", "loom", "--app", APP, "--store", store, "serve"]
    env = {"PYTHONPATH": str(REPO), "LOOM_RESUME_SECRET": SECRET}
    server = procs.start(
        "loom-serve", [*argv, "--port", str(port)], port=port, log_path=log, env=env
    )
    procs.wait_http_ready(server, "/health")
    return server


def _status(server: procs.Server, eid: str) -> dict[str, object]:
    reply = httpx.get(f"http://{server.host}/executions/{eid}?history=false", timeout=5)
    return reply.json()["execution"]


def test_a_restarted_server_runs_the_timers_that_were_pending(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'loom.db'}"
    first = _serve(store, tmp_path / "first.log")
    try:
        for eid, seconds in (("short", 2.0), ("long", 4.0)):
            started = httpx.post(
                f"http://{first.host}/executions",
                json={"flow": "nap", "input": seconds, "execution_id": eid},
                timeout=10,
            )
            assert started.json()["status"] == "suspended", started.text
    finally:
        procs.stop(first)  # the timers are still pending: they die with the process
    second = _serve(store, tmp_path / "second.log")
    try:
        deadline = time.monotonic() + 30
        done: dict[str, object] = {}
        while time.monotonic() < deadline and len(done) < 2:
            for eid in ("short", "long"):
                view = _status(second, eid)
                if view["status"] == "completed":
                    done[eid] = view["output"]
            time.sleep(0.2)
        assert done == {"short": "woke after 2s", "long": "woke after 4s"}, second.log_tail()
    finally:
        procs.stop(second)
