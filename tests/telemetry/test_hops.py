"""A Cloud Tasks hop carries the trace: a flow's durable timer, dispatched by a traced
execute call through the Cloud Tasks emulator, arrives over HTTP with a ``traceparent`` of
that call, on every delivery of the task."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from opentelemetry import trace

from loom import FlowContext, Loom
from loom.errors import RemoteWorkerError
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.wire import ExecutionPackage
from loom.workers.remote import RemoteWorkerRuntime
from loom_gcp.cloud_tasks import CloudTasksDispatcher
from tests.gcp.test_cloud_tasks_emulator import Receiver, receiver
from tests.gcp_emulators import TasksEmulator
from tests.telemetry.conftest import Otel

__all__ = ["receiver"]  # the fixture, used by name
pytestmark = pytest.mark.slow

app = Loom("hops")


@app.flow("nap")
async def nap(ctx: FlowContext, _: None) -> str:
    await ctx.sleep(timedelta(seconds=0.3))
    return "rested"


async def test_the_timer_task_continues_the_execute_calls_trace(
    tmp_path: Path, tasks_emulator: TasksEmulator, receiver: Receiver, otel: Otel
) -> None:
    receiver.statuses = [503]  # the first delivery fails: the retry must carry the same trace
    queue = tasks_emulator.new_queue()
    dispatcher = CloudTasksDispatcher(queue, receiver.url, client=tasks_emulator.client())
    runtime = Runtime(app, SqliteEventStore(tmp_path / "loom.db"), dispatcher=dispatcher)
    await runtime.start("nap", None, execution_id="nap-1", run=False)

    with trace.get_tracer("test").start_as_current_span("client") as client:
        result = await runtime.execute(ExecutionPackage(execution_id="nap-1", flow="nap"))
    assert result.status == "suspended"
    got = receiver.wait_for(2, timeout=30)

    (execute,) = [s for s in otel.spans.get_finished_spans() if s.name == "loom.execute"]
    call = execute.get_span_context()
    assert call is not None and execute.parent is not None
    assert execute.parent.span_id == client.get_span_context().span_id
    expected = f"00-{call.trace_id:032x}-{call.span_id:016x}-"
    assert [d.headers["traceparent"][: len(expected)] for d in got] == [expected, expected]
    assert [d.body["executionPackage"]["reason"] for d in got] == ["timer", "timer"]


async def test_a_remote_worker_call_carries_the_trace(receiver: Receiver, otel: Otel) -> None:
    """The receiver answers 200 with no result, so the call fails after it was sent."""
    worker = RemoteWorkerRuntime(receiver.url)
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("caller") as caller, pytest.raises(RemoteWorkerError):
        await worker.execute(receiver.url, ExecutionPackage(execution_id="r-1"))
    await worker.aclose()
    ctx = caller.get_span_context()
    (got,) = receiver.wait_for(1)
    assert got.headers["traceparent"].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")
