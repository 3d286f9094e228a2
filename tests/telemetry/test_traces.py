"""OpenTelemetry spans and counters of real execute calls, with the SDK's in-memory exporter.

The crash test runs the first execute call in a ``loom serve`` process that SIGKILLs itself
after the effect ran; that process exports its spans to a file as each ends (see
``traced_app``). The recovery, the delivery retried with the same ``traceparent``, runs in
this process through the worker's HTTP handler.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from loom import events as ev
from loom.config import open_store
from loom.runtime import Runtime
from loom.store.base import AppendRequest, StatusChange
from loom.wire import ExecutionPackage
from loom.workers.server import WorkerHandler, create_wsgi_app
from tests import procs
from tests.delivery import crash_app
from tests.telemetry.conftest import Otel

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


def _hex(span: ReadableSpan) -> tuple[str, str, str | None]:
    ctx = span.get_span_context()
    assert ctx is not None
    parent = f"{span.parent.span_id:016x}" if span.parent else None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", parent


async def _crash_in_served_worker(tmp_path: Path, store: str, eid: str) -> list[dict[str, Any]]:
    """Start ``eid`` beside a served worker (after its start-up catch-up), then POST
    /execute to it: it dies after the step's effect ran."""
    spans_file = tmp_path / "spans.jsonl"
    port = procs.free_port()
    argv = [sys.executable, "-m", "loom", "--store", store, "serve", "--port", str(port)]
    env = {
        "PYTHONPATH": str(ROOT),
        "LOOM_APP": "tests.telemetry.traced_app:app",
        "LOOM_TEST_SPANS_FILE": str(spans_file),
        "LOOM_TEST_SIDE_FILE": str(tmp_path / "side.txt"),
        "LOOM_CRASH_AT": "after_effect:1",
    }
    server = procs.start("loom-serve", argv, port=port, log_path=tmp_path / "serve.log", env=env)
    try:
        procs.wait_http_ready(server, "/live")
        # It listens before it catches up on the backlog: a catch-up that lists the runs
        # after the start below would run it too, in a trace of its own.
        procs.wait_log(server, "caught up on the backlog")
        runtime = Runtime(crash_app.app, open_store(store))
        await runtime.start("crash.idempotent", None, execution_id=eid, run=False)
        with pytest.raises(httpx.TransportError):
            await asyncio.to_thread(
                httpx.post,
                f"http://{server.host}/execute",
                json={"executionPackage": {"execution_id": eid}},
                headers={"traceparent": TRACEPARENT},
                timeout=60,
            )
        assert server.proc.wait(timeout=30) == -signal.SIGKILL, server.log_tail()
    finally:
        procs.stop(server)
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    return [s for s in spans if s["name"] != "loom.store.list"]  # the start-up catch-up


async def test_one_flow_across_a_crash_is_one_trace(tmp_path: Path, otel: Otel) -> None:
    store, eid = f"sqlite:///{tmp_path}/loom.db", "traced-1"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(tmp_path / "side.txt")
    crashed = await _crash_in_served_worker(tmp_path, store, eid)
    names = {s["name"] for s in crashed}
    # The dead worker ended its step and store spans; its execute span never ended.
    assert {"loom.step", "loom.store.load", "loom.store.append"} <= names
    assert "loom.execute" not in names
    assert {s["trace_id"] for s in crashed} == {TRACE_ID}
    step = next(s for s in crashed if s["name"] == "loom.step")
    assert step["attributes"] == {
        "loom.execution_id": eid,
        "loom.flow": "crash.idempotent",
        "loom.step_id": "1",
        "loom.effect": "side.idempotent",
        "loom.attempt": 1,
        "loom.idempotency_key": f"{eid}:1",
    }
    dead_execute = {s["parent_id"] for s in crashed if s["name"] == "loom.store.load"}
    assert len(dead_execute) == 1 and None not in dead_execute

    otel.spans.clear()  # the start, made by this process outside any trace
    # The redelivery carries the same traceparent (Cloud Tasks resends the task as created).
    client = create_wsgi_app(WorkerHandler(Runtime(crash_app.app, open_store(store)))).test_client()
    reply = client.post(
        "/execute",
        json={"executionPackage": {"execution_id": eid}},
        headers={"traceparent": TRACEPARENT},
    )
    assert reply.status_code == 200 and reply.get_json()["status"] == "completed"

    spans = otel.spans.get_finished_spans()
    assert {_hex(s)[0] for s in spans} == {TRACE_ID}
    (execute,) = [s for s in spans if s.name == "loom.execute"]
    _, execute_id, execute_parent = _hex(execute)
    assert execute_parent == CLIENT_SPAN  # the same parent as the dead worker's call
    assert execute_id not in dead_execute
    assert execute.attributes is not None
    assert execute.attributes["loom.execution_id"] == eid
    assert execute.attributes["loom.status"] == "completed"
    steps = sorted((s for s in spans if s.name == "loom.step"), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {}).get("loom.step_id") for s in steps] == ["1", "2"]
    assert all(_hex(s)[2] == execute_id for s in steps)  # steps hang under the execute call
    stores = [s for s in spans if s.name.startswith("loom.store.")]
    assert stores and all(_hex(s)[2] == execute_id for s in stores)
    assert all((s.attributes or {}).get("loom.execution_id") == eid for s in stores)
    # Step 1 ran again with the same key: the attempt the dead worker made did not finish.
    assert (steps[0].attributes or {}).get("loom.idempotency_key") == f"{eid}:1"


def test_cloud_run_trace_header_is_continued(tmp_path: Path, otel: Otel) -> None:
    store = f"sqlite:///{tmp_path}/loom.db"
    os.environ["LOOM_TEST_SIDE_FILE"] = str(tmp_path / "side.txt")
    client = create_wsgi_app(WorkerHandler(Runtime(crash_app.app, open_store(store)))).test_client()
    span_decimal = int(CLIENT_SPAN, 16)
    reply = client.post(
        "/executions",
        json={"flow": "crash.idempotent", "execution_id": "ct-1", "input": None},
        headers={"X-Cloud-Trace-Context": f"{TRACE_ID}/{span_decimal};o=1"},
    )
    assert reply.status_code == 200, reply.get_json()
    execute = [s for s in otel.spans.get_finished_spans() if s.name == "loom.execute"]
    assert execute and all(_hex(s)[:1] == (TRACE_ID,) for s in execute)
    assert _hex(execute[0])[2] == CLIENT_SPAN


def test_a_cloud_tasks_hop_carries_the_trace(otel: Otel) -> None:
    """The task a dispatch creates (built, not sent: Cloud Tasks is the emulator's job
    elsewhere) carries the dispatching span's context."""
    from loom.wire import ExecutionPackage
    from loom_gcp.cloud_tasks import CloudTasksDispatcher

    dispatcher = CloudTasksDispatcher(
        "projects/p/locations/l/queues/q", target_url="http://127.0.0.1:9/"
    )
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("dispatching") as current:
        task = dispatcher.build_task(ExecutionPackage(execution_id="hop-1"), "hop-1:1")
    ctx = current.get_span_context()
    assert task.http_request.headers["traceparent"].startswith(
        f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-"
    )


async def test_counters_count_steps_retries_in_doubt_parks_and_verdicts(
    tmp_path: Path, otel: Otel
) -> None:
    os.environ["LOOM_TEST_SIDE_FILE"] = str(tmp_path / "side.txt")
    runtime = Runtime(crash_app.app, open_store(f"sqlite:///{tmp_path}/loom.db"))
    before = otel.counters()
    flaky = await runtime.start("crash.flaky", None, execution_id="flaky-1")
    assert flaky.status == "completed"
    # A non-idempotent step whose intent is recorded with no outcome: a worker died in it.
    await runtime.start("crash.once", None, execution_id="once-1", run=False)
    intent = ev.EffectStarted(
        step_id="1", effect="side.once", attempt=1, idempotency_key="once-1:1", seq=2, at=1.0
    )
    await runtime.store.append(AppendRequest("once-1", 1, [intent], StatusChange("running")))
    parked = await runtime.execute(ExecutionPackage(execution_id="once-1"))
    assert parked.status == "in_doubt"
    episode = parked.in_doubt[0].episode
    done = await runtime.verdict("once-1", "1", "performed", output="x", episode=episode)
    assert done.status == "completed"

    after = otel.counters()

    def grew(name: str, **attrs: str) -> int:
        key = tuple(sorted(attrs.items()))
        return after.get(name, {}).get(key, 0) - before.get(name, {}).get(key, 0)

    assert grew("loom.retries", effect="side.flaky") == 4
    assert grew("loom.steps", effect="side.flaky", outcome="failed") == 1
    assert grew("loom.in_doubt", effect="side.once") == 1
    assert grew("loom.verdicts", verdict="performed") == 1
    assert grew("loom.steps", effect="tail", outcome="completed") == 1


def test_the_tasks_target_continues_the_task_trace(tmp_path: Path, otel: Otel) -> None:
    """A Cloud Tasks delivery (the request the emulator would send) through the real handler."""
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request

    from loom.workers.tasks_target import TasksHandler

    os.environ["LOOM_TEST_SIDE_FILE"] = str(tmp_path / "side.txt")
    runtime = Runtime(crash_app.app, open_store(f"sqlite:///{tmp_path}/loom.db"))
    asyncio.run(runtime.start("crash.idempotent", None, execution_id="task-1", run=False))
    otel.spans.clear()
    package = {"execution_id": "task-1", "flow": "crash.idempotent", "reason": "start"}
    environ = EnvironBuilder(
        method="POST",
        path="/tasks/execute",
        json={"executionPackage": package},
        headers={"traceparent": TRACEPARENT, "X-CloudTasks-TaskName": "t1"},
    ).get_environ()
    reply = TasksHandler(runtime)(Request(environ))
    assert reply.status_code == 200, reply.get_data(as_text=True)
    (execute,) = [s for s in otel.spans.get_finished_spans() if s.name == "loom.execute"]
    assert _hex(execute)[0] == TRACE_ID and _hex(execute)[2] == CLIENT_SPAN
    assert (execute.attributes or {}).get("loom.reason") == "start"
