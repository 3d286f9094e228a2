"""The dedicated HTTP worker and ``RemoteWorkerRuntime``.

The worker is the ``worker`` target as functions-framework builds it
(``functions_framework.create_app(...).test_client()``) over a per-test SQLite file. Where
``RemoteWorkerRuntime`` must talk to it, an ``httpx.MockTransport`` hands each request to
that test client unchanged: the network is the only stand-in, the worker answering is real.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import functions_framework
import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient

from loom import events as ev
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ExecutionSupersededError
from loom.runtime import Runtime
from loom.store import AppendRequest
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.base import WorkerRuntime
from loom.workers.local import LocalWorkerRuntime
from loom.workers.remote import RemoteWorkerRuntime
from loom.workers.server import WorkerHandler, build_runtime, create_wsgi_app
from tests.functions.apps import calls
from tests.functions.conftest import APP_REF, MAIN
from tests.functions.helpers import aseed

JSON = {"Content-Type": "application/json"}


def over(client: FlaskClient, seen: list[str] | None = None) -> httpx.AsyncClient:
    """An httpx client whose every request is served by ``client`` (the real worker)."""

    def serve(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(f"{request.method} {request.url.path}")
        answer = client.open(
            request.url.path,
            method=request.method,
            data=request.content,
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
        )
        return httpx.Response(
            answer.status_code,
            content=answer.data,
            headers={"Content-Type": answer.headers.get("Content-Type", "")},
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(serve))


def fresh_worker() -> FlaskClient:
    """Another ``worker`` target, built from scratch: it shares nothing with an earlier one
    but the environment (the store it points at)."""
    return cast(Flask, functions_framework.create_app("worker", str(MAIN))).test_client()


def test_health_answers_healthy_true(client: FlaskClient) -> None:
    """Checks: "GET /health → { healthy: true }"."""
    answer = client.get("/health")
    assert answer.status_code == 200
    assert answer.json is not None and answer.json["healthy"] is True


async def test_execute_answers_the_execution_result_json_with_its_folded_state(
    client: FlaskClient, runtime: Runtime
) -> None:
    """Checks: "POST /execute with { "executionPackage": {...} } → per request: allocate →
    execute → release on the injected worker → returns the ExecutionResult JSON", and
    "ExecutionResult doubles as the wire contract; it round-trips through JSON (folded
    state included)"."""
    await aseed(runtime, "echo", {"n": 5}, "st-1")
    body = {"executionPackage": {"execution_id": "st-1", "reason": "start"}}
    answer = client.post("/execute", data=json.dumps(body), headers=JSON)
    assert answer.status_code == 200, answer.data
    result = ExecutionResult.model_validate_json(answer.data)
    assert result.execution_id == "st-1" and result.status == "completed"
    assert result.output == {"echo": {"n": 5}, "doubled": 10}
    assert result.state, "the folded state travels with the result"
    assert result.state["status"] == "completed"
    local = await runtime.result("st-1")
    assert ExecutionResult.model_validate_json(result.model_dump_json()) == result
    assert result.state["last_seq"] == local.last_seq == result.last_seq


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-worker", "same-worker"])
async def test_a_suspend_and_its_resume_are_two_independent_execute_calls(
    worker_env: dict[str, str], side_dir: Path, fresh: bool
) -> None:
    """Checks: "a suspend followed by a resume are two independent POST /execute calls that
    succeed purely by rebuilding from shared SQLite — the worker keeps nothing in memory
    across the gate", and "the same LocalDispatcher now wraps a RemoteWorkerRuntime instead
    of a LocalWorkerRuntime, and callers (the orchestrator/bus) are unchanged". Each call
    goes to a worker target built afresh, or both to one (which must then see the resume
    another process recorded, not a state it kept)."""
    seen: list[str] = []
    one = fresh_worker()
    for step in ("start", "resume"):
        target = fresh_worker() if fresh else one
        remote = RemoteWorkerRuntime("http://worker.test/", over(target, seen))
        rt = build_runtime(APP_REF, worker_env["LOOM_STORE"])
        rt.dispatcher = InProcessDispatcher(remote)  # the one-line swap
        try:
            if step == "start":
                result = await rt.start("gated", {"n": 2}, execution_id="sr-1")
                assert result.status == "suspended"
            else:
                result = await rt.resume("sr-1", "go", "sr-1:go", {"name": "eve"})
                assert result.status == "completed"
                assert result.output == {"greeting": "hello eve", "n": 4, "m": 8}
        finally:
            await remote.aclose()
            await rt.store.aclose()
    assert seen == ["POST /execute", "POST /execute"]
    assert sorted(calls(side_dir)) == ["sr-1:1 t.double", "sr-1:3 t.greet", "sr-1:4 t.double"]


class Recording(WorkerRuntime):
    """Wraps a worker runtime: logs each SPI call and keeps each result; or refuses every
    execute as superseded."""

    def __init__(self, inner: WorkerRuntime, *, superseded: bool = False) -> None:
        self.inner = inner
        self.superseded = superseded
        self.log: list[str] = []
        self.results: list[ExecutionResult] = []

    async def allocate(self, package: ExecutionPackage) -> Any:
        self.log.append(f"allocate {package.execution_id}")
        return await self.inner.allocate(package)

    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        self.log.append(f"execute {package.execution_id}")
        if self.superseded:
            raise ExecutionSupersededError("held elsewhere", details={"holder": "h:1:1"})
        self.results.append(await self.inner.execute(handle, package))
        return self.results[-1]

    async def release(self, handle: Any) -> None:
        self.log.append(f"release {handle}")
        await self.inner.release(handle)

    async def aclose(self) -> None:
        await self.inner.aclose()


def normalized(value: Any) -> Any:
    """``value`` with holder ids, dispatch ids and timestamps blanked."""
    volatile = {"at", "until", "holder", "started_at", "updated_at", "wake_at", "dispatch_id"}
    volatile |= {"effect_seconds"}
    if isinstance(value, dict):
        return {k: None if k in volatile else normalized(v) for k, v in value.items()}  # type: ignore[misc]
    if isinstance(value, list):
        return [normalized(v) for v in value]  # type: ignore[misc]
    return value


async def test_remote_results_equal_in_process_ones(
    client: FlaskClient, worker_env: dict[str, str], tmp_path: Any
) -> None:
    """Checks: "remote and in-process results are byte-comparable (modulo ids/timestamps)":
    the same start and resume, once over the HTTP worker and once in process on another
    store, give the same results."""
    answers: dict[str, list[dict[str, Any]]] = {}
    stores = {"remote": worker_env["LOOM_STORE"], "local": f"sqlite:///{tmp_path / 'l.db'}"}
    for where, store in stores.items():
        rt = build_runtime(APP_REF, store)
        inner = RemoteWorkerRuntime("http://worker.test", over(client))
        worker = Recording(inner if where == "remote" else LocalWorkerRuntime(rt))
        rt.dispatcher = InProcessDispatcher(worker)
        try:
            await rt.start("gated", {"n": 3}, execution_id="par-1")
            await rt.resume("par-1", "go", "par-1:go", {"name": "flo"})
        finally:
            await worker.aclose()
            await inner.aclose()
            await rt.store.aclose()
        answers[where] = [normalized(r.model_dump(mode="json")) for r in worker.results]
    assert [a["status"] for a in answers["remote"]] == ["suspended", "completed"]
    assert answers["remote"] == answers["local"]


async def claimed_elsewhere(runtime: Runtime, execution_id: str) -> None:
    """Seed ``execution_id`` with a live claim of a holder on another machine."""
    await aseed(runtime, "echo", {"n": 1}, execution_id)
    now = time.time()
    claim = ev.ExecutionClaimed(holder="another-host:7:1", until=now + 60, seq=2, at=now)
    await runtime.store.append(AppendRequest(execution_id, 1, [claim]))


async def test_execute_of_an_execution_another_holder_owns_is_409_superseded(
    client: FlaskClient, runtime: Runtime, side_dir: Path
) -> None:
    """Checks: "POST /execute answers a refusal because another holder owns the execution
    with 409 { code: "superseded" } instead of a 500", "RemoteWorkerRuntime maps it to
    ExecutionSupersededError, so a retrying dispatcher can decline to redispatch it"."""
    await claimed_elsewhere(runtime, "held-1")
    body = {"executionPackage": {"execution_id": "held-1"}}
    answer = client.post("/execute", data=json.dumps(body), headers=JSON)
    assert answer.status_code == 409, answer.data
    assert answer.json is not None and answer.json["code"] == "superseded"

    seen: list[str] = []
    remote = RemoteWorkerRuntime("http://worker.test", over(client, seen))
    package = ExecutionPackage(execution_id="held-1", reason="manual")
    with pytest.raises(ExecutionSupersededError):
        await remote.run(package)
    dispatcher = InProcessDispatcher(remote)
    await dispatcher.dispatch(package, "held-1:again")
    await dispatcher.drain(timeout=10)
    assert dispatcher.superseded == ["held-1"]
    assert seen == ["POST /execute", "POST /execute"]  # refused once each, never retried
    assert calls(side_dir) == []
    await remote.aclose()


async def test_allocate_and_release_keep_no_client_side_state_and_send_nothing() -> None:
    """Checks: "allocate/release are trivial (no client-side state); execute POSTs the
    package to {baseUrl}/execute"."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(500, text="boom")

    remote = RemoteWorkerRuntime(
        "http://w.test/", httpx.AsyncClient(transport=httpx.MockTransport(record))
    )
    package = ExecutionPackage(execution_id="e-1", reason="start")
    handle = await remote.allocate(package)
    await remote.release(handle)
    assert seen == []
    assert await remote.allocate(ExecutionPackage(execution_id="e-2")) == handle
    await remote.aclose()


@pytest.mark.parametrize("superseded", [False, True])
async def test_execute_allocates_executes_and_releases_on_the_injected_worker(
    worker_env: dict[str, str], runtime: Runtime, superseded: bool
) -> None:
    """Checks: "createWorkerServer(worker: WorkerRuntime, options)" … "POST /execute …
    → per request: allocate → execute → release on the injected worker"; release happens
    even when the worker refuses (then 409 { code: "superseded" })."""
    await aseed(runtime, "echo", {"n": 1}, "inj-1")
    workers: list[Recording] = []

    def inject(rt: Runtime) -> WorkerRuntime:
        workers.append(Recording(LocalWorkerRuntime(rt), superseded=superseded))
        return workers[-1]

    handler = WorkerHandler(build_runtime(APP_REF, worker_env["LOOM_STORE"]), worker=inject)
    client = create_wsgi_app(handler).test_client()
    body = json.dumps({"executionPackage": {"execution_id": "inj-1"}})
    for _ in range(2):
        answer = client.post("/execute", data=body, headers=JSON)
        assert answer.status_code == (409 if superseded else 200), answer.data
        assert answer.json is not None
        assert answer.json.get("code" if superseded else "execution_id") == (
            "superseded" if superseded else "inj-1"
        )
    [worker] = workers
    assert worker.log == ["allocate inj-1", "execute inj-1", "release inj-1"] * 2
    await handler.services().runtime.store.aclose()
