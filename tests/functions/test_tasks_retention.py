"""The sweeper pages through every running execution; ``POST /tasks/purge`` deletes finished
executions past retention with their blobs, and their ids start again as new executions."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from loom.blobs import LocalBlobStore
from loom.errors import ConfigurationError, UnknownExecutionError
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.workers.loop import BackgroundLoop
from loom.workers.tasks_target import TasksHandler, purge, sweep
from tests.functions.test_tasks_target import (
    FIRST,
    Recorder,
    app,
    body,
    calls,
    client_for,
    execute_task,
    sent,
)


@pytest.fixture
async def rt(tmp_path: Path) -> Any:
    calls.clear()
    runtime = Runtime(
        app,
        SqliteEventStore(tmp_path / "t.db"),
        dispatcher=Recorder(),
        blobs=LocalBlobStore(tmp_path / "blobs"),
        blob_threshold=64,
    )
    yield runtime
    await runtime.store.aclose()


async def test_the_sweeper_pages_through_every_running_execution_oldest_first(
    rt: Runtime,
) -> None:
    ids = [f"e{i}" for i in range(7)]
    for eid in ids:
        await rt.start("echo", "x", execution_id=eid, run=False)
    later = time.time() + 120
    report = await sweep(rt, grace=60, clock=lambda: later, limit=3)
    assert report["redispatched"] == ids  # not just the newest page
    assert [p.execution_id for p, _, _ in sent(rt).sent] == ids


async def test_purge_deletes_finished_executions_and_their_blobs(
    rt: Runtime, tmp_path: Path
) -> None:
    big = "x" * 200  # over the blob threshold: input and output go to the blob store
    await rt.start("echo", big, execution_id="done")
    await execute_task(rt, body("done"), FIRST)
    await rt.start("gate", big, execution_id="waiting")
    await execute_task(rt, body("waiting"), FIRST)
    assert (tmp_path / "blobs" / "done").is_dir()
    env = {"LOOM_RETENTION": "0.001s"}
    await asyncio.sleep(0.01)
    summary = await purge(rt, env)
    assert (summary.purged, summary.complete) == (1, True)
    assert summary.blobs >= 2
    assert not (tmp_path / "blobs" / "done").exists()
    assert (tmp_path / "blobs" / "waiting").is_dir()  # not finished: kept
    with pytest.raises(UnknownExecutionError):
        await rt.result("done")
    assert (await purge(rt, env)).purged == 0  # idempotent
    # The id is free again: a new execution, with its own input.
    await rt.start("echo", "again", execution_id="done")
    await execute_task(rt, body("done"), FIRST)
    result = await rt.result("done")
    assert (result.status, result.output) == ("completed", "again")


async def test_purge_keeps_what_finished_within_retention(rt: Runtime) -> None:
    await rt.start("echo", "x", execution_id="recent")
    await execute_task(rt, body("recent"), FIRST)
    assert (await purge(rt, {})).purged == 0  # default 30d
    assert (await rt.result("recent")).status == "completed"


@pytest.mark.parametrize("env", [{"LOOM_RETENTION": "soon"}, {"LOOM_PURGE_BUDGET": "x"}])
async def test_a_bad_retention_setting_is_named(rt: Runtime, env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="LOOM_RETENTION"):
        await purge(rt, env)


def test_http_purge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = BackgroundLoop()
    runtime = Runtime(app, SqliteEventStore(tmp_path / "h.db"), dispatcher=Recorder())
    client = client_for(TasksHandler(runtime, loop=loop))
    loop.run(runtime.start("echo", "x", execution_id="e1"))
    loop.run(execute_task(runtime, body("e1"), FIRST))
    monkeypatch.setenv("LOOM_RETENTION", "1s")
    time.sleep(1.1)
    response = client.post("/tasks/purge")
    assert response.status_code == 200
    reply = json.loads(response.data)
    assert (reply["purged"], reply["complete"]) == (1, True)
    assert client.get("/tasks/purge").status_code == 405
    with pytest.raises(UnknownExecutionError):
        loop.run(runtime.result("e1"))
