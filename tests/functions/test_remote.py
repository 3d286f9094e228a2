"""``RemoteWorkerRuntime`` over ``httpx.MockTransport``: no network, exact requests."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ExecutionSupersededError, RemoteWorkerError, WorkerError
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.remote import RemoteWorkerRuntime

PACKAGE = ExecutionPackage(execution_id="e-1", flow="echo", reason="start", dispatch_id="e-1:1")
RESULT = ExecutionResult(
    execution_id="e-1", flow="echo", status="completed", output={"x": 1}, last_seq=4
)


def _worker(
    handler: Callable[[httpx.Request], httpx.Response], base: str
) -> tuple[RemoteWorkerRuntime, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(record))
    return RemoteWorkerRuntime(base, client), seen


def _ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        200, content=RESULT.model_dump_json(), headers={"Content-Type": "application/json"}
    )


@pytest.mark.parametrize(
    "base", ["http://worker.test", "http://worker.test/", "http://worker.test///"]
)
async def test_posts_the_package_to_execute(base: str) -> None:
    worker, seen = _worker(_ok, base)
    result = await worker.run(PACKAGE)
    assert result == RESULT
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == "http://worker.test/execute"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {
        "executionPackage": {
            "execution_id": "e-1",
            "flow": "echo",
            "reason": "start",
            "dispatch_id": "e-1:1",
        }
    }


async def test_a_path_prefix_is_kept() -> None:
    worker, seen = _worker(_ok, "http://worker.test/loom/")
    await worker.run(PACKAGE)
    assert seen[0].url.path == "/loom/execute"


async def test_non_2xx_raises_with_status_and_body() -> None:
    body = '{"code": "internal", "message": "boom", "details": {"error_id": "abc"}}'
    worker, _ = _worker(lambda r: httpx.Response(500, text=body), "http://w.test")
    with pytest.raises(RemoteWorkerError) as info:
        await worker.run(PACKAGE)
    assert info.value.status == 500
    assert info.value.body == body
    assert info.value.details["status"] == 500


async def test_409_superseded_raises_superseded() -> None:
    body = {"code": "superseded", "message": "held by h:1:2", "details": {"holder": "h:1:2"}}
    worker, _ = _worker(lambda r: httpx.Response(409, json=body), "http://w.test")
    with pytest.raises(ExecutionSupersededError) as info:
        await worker.run(PACKAGE)
    assert info.value.message == "held by h:1:2"
    assert info.value.details == {"holder": "h:1:2"}


async def test_409_of_another_kind_is_a_remote_error() -> None:
    body = {"code": "conflict", "message": "other input", "details": {}}
    worker, _ = _worker(lambda r: httpx.Response(409, json=body), "http://w.test")
    with pytest.raises(RemoteWorkerError) as info:
        await worker.run(PACKAGE)
    assert info.value.status == 409


async def test_a_2xx_that_is_not_a_result_is_a_remote_error() -> None:
    worker, _ = _worker(lambda r: httpx.Response(200, json={"hello": 1}), "http://w.test")
    with pytest.raises(RemoteWorkerError) as info:
        await worker.run(PACKAGE)
    assert info.value.status == 200


async def test_unreachable_is_a_worker_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    worker, _ = _worker(refuse, "http://w.test")
    with pytest.raises(WorkerError) as info:
        await worker.run(PACKAGE)
    assert not isinstance(info.value, RemoteWorkerError)


async def test_dispatcher_over_remote_does_not_redispatch_superseded() -> None:
    body = {"code": "superseded", "message": "held", "details": {}}
    worker, seen = _worker(lambda r: httpx.Response(409, json=body), "http://w.test")
    dispatcher = InProcessDispatcher(worker)
    await dispatcher.dispatch(PACKAGE, "e-1:1")
    await dispatcher.dispatch(PACKAGE, "e-1:1")  # the same cause again: deduplicated
    await dispatcher.drain(timeout=5)
    assert len(seen) == 1
    assert dispatcher.superseded == ["e-1"]
    assert dispatcher.pending_timers == 0


async def test_owned_client_is_closed_and_injected_one_is_not() -> None:
    injected = httpx.AsyncClient(transport=httpx.MockTransport(_ok))
    await RemoteWorkerRuntime("http://w.test", injected).aclose()
    assert not injected.is_closed
    owned = RemoteWorkerRuntime("http://w.test")
    client = owned.client
    await owned.aclose()
    assert client.is_closed
    await injected.aclose()
