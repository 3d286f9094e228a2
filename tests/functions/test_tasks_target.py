"""The Cloud Tasks target: what ``POST /tasks/execute`` answers in each state, re-arms, the
retried-task timer guarantee, overlapping deliveries, and the sweeper."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from flask import Flask, Request, request

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.dispatch.base import Dispatcher
from loom.errors import ConfigurationError, StoreError
from loom.runtime import Runtime
from loom.store.base import AppendRequest
from loom.store.sqlite import SqliteEventStore
from loom.wire import ExecutionPackage
from loom.workers.loop import BackgroundLoop
from loom.workers.tasks_target import (
    TaskBody,
    TaskInfo,
    TasksHandler,
    execute_task,
    sweep,
)
from tests.functions.conftest import MAIN
from tests.functions.helpers import history, seed

app = Loom("tasks-target-tests")
calls: list[str] = []
entered = asyncio.Event()
release = asyncio.Event()


@app.effect("tt.note")
async def note(ctx: EffectContext, what: str) -> str:
    calls.append(ctx.idempotency_key)
    return what


@app.effect("tt.wait")
async def wait(ctx: EffectContext, what: str) -> str:
    calls.append(ctx.idempotency_key)
    entered.set()
    await asyncio.wait_for(release.wait(), 10)
    return what


@app.flow("echo")
async def echo(ctx: FlowContext, value: str) -> str:
    return await ctx.execute(note, value)


@app.flow("gate")
async def gate(ctx: FlowContext, value: str) -> str:
    await ctx.execute(note, value)
    return await ctx.suspend(on="go", correlation_key=f"{ctx.execution_id}:go")


@app.flow("nap")
async def nap(ctx: FlowContext, seconds: float) -> str:
    await ctx.execute(note, "before")
    await ctx.sleep(timedelta(seconds=seconds))
    return await ctx.execute(note, "after")


@app.flow("held")
async def held(ctx: FlowContext, value: str) -> str:
    return await ctx.execute(wait, value)


class Recorder(Dispatcher):
    """Records dispatches instead of delivering them (Cloud Tasks would)."""

    def __init__(self) -> None:
        self.sent: list[tuple[ExecutionPackage, str, float | None]] = []

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        self.sent.append((package, dispatch_id, not_before))

    @property
    def ids(self) -> list[str]:
        return [d[1] for d in self.sent]


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    global entered, release  # fresh events: each test has its own event loop
    calls.clear()
    entered, release = asyncio.Event(), asyncio.Event()
    runtime = Runtime(app, SqliteEventStore(tmp_path / "t.db"), dispatcher=Recorder())
    yield runtime
    await runtime.store.aclose()


def sent(rt: Runtime) -> Recorder:
    assert isinstance(rt.dispatcher, Recorder)
    return rt.dispatcher


def follow_ups(rt: Runtime) -> list[tuple[ExecutionPackage, str, float | None]]:
    """The follow-up tasks of superseded deliveries."""
    return [d for d in sent(rt).sent if ":held@" in d[1]]


def body(eid: str, not_before: float | None = None, reason: Any = "start") -> TaskBody:
    package = ExecutionPackage(execution_id=eid, reason=reason, dispatch_id=f"{eid}:1")
    return TaskBody(executionPackage=package, notBefore=not_before)


FIRST = TaskInfo(task="t1", retry_count=0)
RETRY = TaskInfo(task="t1", retry_count=1)


async def test_a_task_runs_the_execution_and_answers_2xx(rt: Runtime) -> None:
    await rt.start("echo", "hi", execution_id="e1")
    status, reply, _ = await execute_task(rt, body("e1"), FIRST)
    assert (status, reply["outcome"], reply["status"]) == (200, "finished", "completed")
    assert calls == ["e1:1"]


async def test_duplicates_of_a_finished_or_waiting_execution_change_nothing(rt: Runtime) -> None:
    for eid, flow, outcome in (("e1", "echo", "finished"), ("e2", "gate", "waiting")):
        await rt.start(flow, "hi", execution_id=eid)
        await execute_task(rt, body(eid), FIRST)
        before = await rt.history(eid)
        for _ in range(3):
            status, reply, _ = await execute_task(rt, body(eid), FIRST)
            assert (status, reply["outcome"]) == (200, outcome)
        assert await rt.history(eid) == before
    assert calls == ["e1:1", "e2:1"]


async def test_a_live_claim_of_another_holder_defers_to_a_task_due_when_it_lapses(
    rt: Runtime,
) -> None:
    """2xx, not 503: Cloud Tasks slows the whole queue down on 429/503."""
    await rt.start("echo", "hi", execution_id="e1")
    until = time.time() + 20
    claim = ev.ExecutionClaimed(holder="another-host:7:1", until=until, seq=2, at=time.time())
    await rt.store.append(AppendRequest("e1", 1, [claim]))
    status, reply, headers = await execute_task(rt, body("e1"), RETRY)
    assert (status, reply["outcome"], headers) == (200, "deferred", {})
    due = math.ceil(until) + 1
    assert [(p.execution_id, i, t) for p, i, t in follow_ups(rt)] == [
        ("e1", f"e1:1:held@{due}", due)
    ]
    # Every delivery superseded by the same claim makes the same (deduplicated) task.
    await execute_task(rt, body("e1"), FIRST)
    assert [i for _, i, _ in follow_ups(rt)] == [f"e1:1:held@{due}"] * 2
    assert len(await rt.history("e1")) == 2 and calls == []


async def test_the_follow_up_runs_the_execution_once_the_claim_has_lapsed(rt: Runtime) -> None:
    await rt.start("echo", "hi", execution_id="e1")
    now = time.time()
    claim = ev.ExecutionClaimed(holder="another-host:7:1", until=now + 20, seq=2, at=now)
    await rt.store.append(AppendRequest("e1", 1, [claim]))
    await execute_task(rt, body("e1"), FIRST)
    package, dispatch_id, not_before = follow_ups(rt)[0]
    assert not_before is not None
    follow_up = TaskBody(
        executionPackage=package.model_copy(update={"dispatch_id": dispatch_id}),
        notBefore=not_before,
    )
    rt.clock = lambda: not_before  # the follow-up arrives when it is due
    status, reply, _ = await execute_task(rt, follow_up, FIRST, clock=rt.clock)
    assert (status, reply["outcome"]) == (200, "finished") and calls == ["e1:1"]


async def test_a_held_follow_up_of_an_extended_claim_makes_one_new_hop(rt: Runtime) -> None:
    await rt.start("echo", "hi", execution_id="e1")
    now = time.time()
    claim = ev.ExecutionClaimed(holder="another-host:7:1", until=now + 60, seq=2, at=now)
    await rt.store.append(AppendRequest("e1", 1, [claim]))
    package = ExecutionPackage(execution_id="e1", reason="start", dispatch_id="e1:1:held@5")
    status, reply, _ = await execute_task(rt, TaskBody(executionPackage=package), FIRST)
    assert (status, reply["outcome"]) == (200, "deferred")
    assert [i for _, i, _ in follow_ups(rt)] == [
        f"e1:1:held@{math.ceil(now + 60) + 1}"
    ]  # no growth


async def test_a_follow_up_that_is_itself_still_held_asks_to_be_retried(rt: Runtime) -> None:
    """Clock skew: its own name is taken until it ends, so 503 is the only safe answer."""
    await rt.start("echo", "hi", execution_id="e1")
    now = float(int(time.time()))
    claim = ev.ExecutionClaimed(holder="another-host:7:1", until=now + 60, seq=2, at=now)
    await rt.store.append(AppendRequest("e1", 1, [claim]))
    own = f"e1:1:held@{math.ceil(now + 60) + 1}"
    package = ExecutionPackage(execution_id="e1", reason="start", dispatch_id=own)
    task = TaskBody(executionPackage=package)
    status, reply, headers = await execute_task(rt, task, FIRST, clock=lambda: now)
    assert (status, reply["code"]) == (503, "superseded") and headers["Retry-After"] == "61"
    assert follow_ups(rt) == []


async def test_overlapping_deliveries_run_the_execution_once(rt: Runtime) -> None:
    await rt.start("held", "x", execution_id="e1")
    first = asyncio.create_task(execute_task(rt, body("e1"), FIRST))
    await asyncio.wait_for(entered.wait(), 5)
    status, reply, headers = await execute_task(rt, body("e1"), FIRST)  # the overlap
    assert (status, reply["outcome"], headers) == (200, "deferred", {})
    assert [i for _, i, _ in follow_ups(rt)] == [reply["dispatch_id"]]
    release.set()
    assert (await first)[0] == 200
    assert calls == ["e1:1"]


async def test_an_unknown_execution_is_acknowledged(rt: Runtime) -> None:
    status, reply, _ = await execute_task(rt, body("nobody"), FIRST)
    assert (status, reply["outcome"]) == (200, "unknown_execution")


async def test_a_timer_that_arrives_long_before_its_time_is_rearmed(rt: Runtime) -> None:
    await rt.start("nap", 3600.0 * 24 * 45, execution_id="e1")
    await execute_task(rt, body("e1"), FIRST)
    [(_, timer_id, wake)] = sent(rt).sent[1:]  # after the start's own dispatch
    assert timer_id.endswith(":timer") and wake is not None
    early = body("e1", not_before=wake, reason="timer")
    early = early.model_copy(
        update={
            "executionPackage": early.executionPackage.model_copy(update={"dispatch_id": timer_id})
        }
    )
    history = await rt.history("e1")
    status, reply, _ = await execute_task(rt, early, FIRST)
    assert (status, reply["outcome"]) == (200, "rearmed")
    package, rearm_id, rearm_at = sent(rt).sent[-1]
    assert (rearm_id, rearm_at, package.execution_id) == (f"{timer_id}:rearm", wake, "e1")
    assert await rt.history("e1") == history  # nothing ran


async def test_a_timer_a_moment_early_waits_for_its_time(rt: Runtime) -> None:
    await rt.start("nap", 0.3, execution_id="e1")
    await execute_task(rt, body("e1"), FIRST)
    wake = sent(rt).sent[-1][2]
    assert wake is not None
    status, reply, _ = await execute_task(rt, body("e1", not_before=wake, reason="timer"), FIRST)
    assert time.time() >= wake
    assert (status, reply["status"]) == (200, "completed")


async def test_a_redelivered_task_that_finds_it_sleeping_dispatches_the_timer_again(
    rt: Runtime,
) -> None:
    await rt.start("nap", 600.0, execution_id="e1")
    await execute_task(rt, body("e1"), FIRST)
    timer = sent(rt).sent[-1]
    for info in (FIRST, RETRY):  # the attempt that suspended may have died before its dispatch
        sent(rt).sent.clear()
        await execute_task(rt, body("e1"), info)
        [(package, dispatch_id, wake)] = sent(rt).sent
        assert (dispatch_id, wake) == (timer[1], timer[2])  # the same name: deduplicated
        assert package.reason == "timer"


async def test_the_sweeper_redispatches_only_what_is_stranded(rt: Runtime) -> None:
    now = time.time()
    # running, claimed by a holder on another machine whose lease has expired
    await rt.start("echo", "a", execution_id="expired")
    stale = ev.ExecutionClaimed(holder="gone-host:1:1", until=now - 5, seq=2, at=now - 100)
    await rt.store.append(AppendRequest("expired", 1, [stale]))
    # running, claim still live
    await rt.start("echo", "b", execution_id="live")
    live = ev.ExecutionClaimed(holder="busy-host:1:1", until=now + 3600, seq=2, at=now - 100)
    await rt.store.append(AppendRequest("live", 1, [live]))
    # a timer that fell due long ago (its task was lost), a gate, a finished one
    await rt.start("nap", 0.01, execution_id="overdue")
    await execute_task(rt, body("overdue"), FIRST)
    await rt.start("gate", "c", execution_id="gated")
    await execute_task(rt, body("gated"), FIRST)
    await rt.start("echo", "d", execution_id="done")
    await execute_task(rt, body("done"), FIRST)
    sent(rt).sent.clear()
    later = now + 120
    report = await sweep(rt, grace=60, clock=lambda: later)
    assert sorted(report["redispatched"]) == ["expired", "overdue"]
    assert report["timers"] == 1
    reasons = {p.execution_id: (p.reason, i) for p, i, _ in sent(rt).sent}
    assert reasons["expired"][0] == "sweep" and reasons["overdue"][0] == "timer"
    assert reasons["expired"][1] == f"expired:2:sweep@{int(later // 60)}"
    # Fresh work (a start whose task is pending) is left to its task.
    sent(rt).sent.clear()
    await rt.start("echo", "e", execution_id="fresh")
    assert "fresh" not in (await sweep(rt, grace=60))["redispatched"]


# -- the HTTP adapter ------------------------------------------------------------------------


def client_for(handler: TasksHandler) -> Any:
    flask_app = Flask("tasks-test")

    def view(path: str = "") -> Any:
        req: Request = request._get_current_object()  # type: ignore[attr-defined]
        return handler(req)

    flask_app.add_url_rule("/<path:path>", "tasks", view, methods=["GET", "POST", "PUT"])
    return flask_app.test_client()


@pytest.fixture
def http(tmp_path: Path) -> Any:
    calls.clear()
    loop = BackgroundLoop()
    runtime = Runtime(app, SqliteEventStore(tmp_path / "h.db"), dispatcher=Recorder())
    return runtime, loop, client_for(TasksHandler(runtime, loop=loop, sweep_grace=60))


def test_http_execute_reads_the_task_and_answers_json(http: Any) -> None:
    runtime, loop, client = http
    loop.run(runtime.start("echo", "hi", execution_id="e1"))
    payload = {
        "executionPackage": {"execution_id": "e1", "reason": "start"},
        "notBefore": None,
        "futureField": 1,
    }
    response = client.post(
        "/tasks/execute",
        json=payload,
        headers={"X-CloudTasks-TaskName": "abc", "X-CloudTasks-TaskRetryCount": "2"},
    )
    assert response.status_code == 200, response.data
    assert json.loads(response.data)["status"] == "completed"


def test_http_bad_requests_are_4xx_json(http: Any) -> None:
    _, _, client = http
    assert (
        client.post("/tasks/execute", data="nope", content_type="application/json").status_code
        == 400
    )
    assert client.post("/tasks/execute", json={"executionPackage": {}}).status_code == 400
    wrong = client.get("/tasks/execute")
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "POST"
    assert client.post("/elsewhere", json={}).status_code == 404


def test_http_superseded_is_2xx_with_a_follow_up_task(http: Any) -> None:
    runtime, loop, client = http
    loop.run(runtime.start("echo", "hi", execution_id="e1"))
    now = time.time()
    claim = ev.ExecutionClaimed(holder="another-host:7:1", until=now + 9, seq=2, at=now)
    loop.run(runtime.store.append(AppendRequest("e1", 1, [claim])))
    response = client.post(
        "/tasks/execute", json={"executionPackage": {"execution_id": "e1", "reason": "start"}}
    )
    assert response.status_code == 200 and "Retry-After" not in response.headers
    reply = json.loads(response.data)
    assert reply["outcome"] == "deferred"
    assert reply["not_before"] == math.ceil(now + 9) + 1


def test_http_a_failing_store_is_a_503_with_retry_after_and_an_error_id(
    http: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, _, client = http

    async def broken(execution_id: str) -> Any:
        raise StoreError("the store is down")

    monkeypatch.setattr(runtime.store, "load", broken)
    response = client.post(
        "/tasks/execute", json={"executionPackage": {"execution_id": "e1", "reason": "start"}}
    )
    assert response.status_code == 503  # Cloud Tasks retries it, honouring Retry-After
    assert int(response.headers["Retry-After"]) >= 1
    body = json.loads(response.data)
    assert body["code"] == "store" and body["details"]["error_id"]


def test_http_health_reports_a_runtime_that_cannot_be_built() -> None:
    def broken() -> Runtime:
        raise ConfigurationError("LOOM_STORE is nonsense")

    response = client_for(TasksHandler(broken)).get("/health")
    assert response.status_code == 503
    assert json.loads(response.data)["healthy"] is False


def test_http_sweep(http: Any) -> None:
    _, _, client = http
    response = client.post("/tasks/sweep")
    assert response.status_code == 200
    assert json.loads(response.data) == {"redispatched": [], "timers": 0}


def test_the_functions_framework_target_serves_tasks(
    worker_env: dict[str, str], runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_DISPATCH", "inline://")
    seed(runtime, "echo", {"n": 4}, "ff-1")
    target = functions_framework.create_app("tasks", str(MAIN)).test_client()
    response = target.post(
        "/tasks/execute",
        json={"executionPackage": {"execution_id": "ff-1", "reason": "start"}},
        headers={"X-CloudTasks-TaskName": "abc"},
    )
    assert response.status_code == 200, response.data
    assert json.loads(response.data)["outcome"] == "finished"
    assert history(runtime, "ff-1")[-1].type == "ExecutionCompleted"
