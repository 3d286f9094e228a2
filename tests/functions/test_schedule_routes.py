"""Schedules on the workers: ``POST /tasks/schedules`` (Cloud Scheduler's tick on the tasks
target) delivered twice starts each tick once; ``loom serve`` fires schedules by itself on
real HTTP, and ``GET /schedules`` lists them with their next fire time."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask, request

from loom.primitives.schedules import live
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.workers.loop import BackgroundLoop
from loom.workers.tasks_target import TasksHandler
from tests import procs
from tests.flowcontrol import schedule_app
from tests.functions.conftest import REPO

APP = "tests.flowcontrol.schedule_app:app"


def _client(handler: TasksHandler) -> Any:
    flask_app = Flask("tasks-test")

    def view(path: str = "") -> Any:
        return handler(request._get_current_object())  # type: ignore[attr-defined]

    flask_app.add_url_rule("/<path:path>", "tasks", view, methods=["GET", "POST"])
    return flask_app.test_client()


def test_the_tick_route_delivered_twice_starts_each_tick_once(tmp_path: Path) -> None:
    loop = BackgroundLoop()
    runtime = Runtime(schedule_app.app, SqliteEventStore(tmp_path / "t.db"))
    loop.run(live(runtime, runtime.clock() - 3600))  # declared an hour before
    client = _client(TasksHandler(runtime, loop=loop))
    first = client.post("/tasks/schedules", json={})
    second = client.post("/tasks/schedules", json={})
    assert first.status_code == second.status_code == 200
    started = [f["execution_id"] for f in first.json["fired"] if f["started"]]
    assert any(e.startswith("schedule:minutely@") for e in started)
    again = {f["execution_id"]: f for f in second.json["fired"]}
    assert all(not again[e]["started"] for e in started if e in again)
    rows = loop.run(runtime.store.list(limit=1000))
    assert set(Counter(r.execution_id for r in rows).values()) == {1}
    assert {r.status for r in rows} == {"completed"}
    assert client.get("/tasks/schedules").status_code == 405
    loop.run(runtime.store.aclose())


@pytest.mark.slow
def test_loom_serve_fires_schedules_and_lists_them(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'loom.db'}"
    port = procs.free_port()
    argv = [sys.executable, "-m", "loom", "--app", APP, "--store", store, "serve"]
    env = {"PYTHONPATH": str(REPO), "LOOM_SCHEDULE_INTERVAL": "0.5"}
    with procs.running(
        "loom-serve",
        [*argv, "--port", str(port)],
        port=port,
        log_path=tmp_path / "serve.log",
        ready_path="/health",
        env=env,
    ) as server:
        listed = httpx.get(f"http://{server.host}/schedules").json()["schedules"]
        assert [s["name"] for s in listed] == ["every-5", "hourly", "minutely"]
        assert all(
            s["next_fire"] > time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) for s in listed
        )
        done = _wait_for_minutely(tmp_path / "loom.db")
    assert done, (tmp_path / "serve.log").read_text()[-2000:]


def _wait_for_minutely(db: Path) -> list[str]:
    async def look() -> list[str]:
        store = SqliteEventStore(db)
        try:
            rows = await store.list("completed", limit=1000)
        finally:
            await store.aclose()
        return [r.execution_id for r in rows if r.execution_id.startswith("schedule:minutely@")]

    deadline = time.monotonic() + 75  # (its first tick is the first after it was seen)
    while time.monotonic() < deadline:
        found = asyncio.run(look())
        if found:
            return found
        time.sleep(0.5)
    return []
