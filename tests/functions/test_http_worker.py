"""The worker on real HTTP: functions-framework on loopback, one SQLite file shared with the
test process, ``RemoteWorkerRuntime`` as the client (ADR 0002's verification)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from loom import events as ev
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ExecutionSupersededError, WorkerError
from loom.runtime import Runtime
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.base import WorkerRuntime
from loom.workers.local import LocalWorkerRuntime
from loom.workers.remote import RemoteWorkerRuntime
from loom.workers.server import build_runtime
from tests import procs
from tests.functions.apps import calls
from tests.functions.conftest import APP_REF, BEARER, SECRET, WorkerFactory, start_worker
from tests.functions.helpers import ERROR_KEYS, aseed

pytestmark = pytest.mark.slow

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def url(server: procs.Server) -> str:
    return f"http://{server.host}"


def log_entries(server: procs.Server) -> list[dict[str, Any]]:
    lines = server.log_path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


class Recording(WorkerRuntime):
    """Delegates to another worker runtime and keeps every result it returns."""

    def __init__(self, inner: WorkerRuntime) -> None:
        self.inner = inner
        self.results: list[ExecutionResult] = []

    async def allocate(self, package: ExecutionPackage) -> Any:
        return await self.inner.allocate(package)

    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        result = await self.inner.execute(handle, package)
        self.results.append(result)
        return result

    async def release(self, handle: Any) -> None:
        await self.inner.release(handle)

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def dispatching(store_url: str, worker: WorkerRuntime) -> AsyncIterator[Runtime]:
    """A runtime whose dispatcher hands executions to ``worker``: the one-line swap from
    ``LocalWorkerRuntime``. Closes the worker's client and the store after."""
    runtime = build_runtime(APP_REF, store_url)
    runtime.dispatcher = InProcessDispatcher(worker)
    try:
        yield runtime
    finally:
        await worker.aclose()
        await runtime.store.aclose()


@pytest.fixture(scope="module")
def shared_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[procs.Server]:
    """One worker for the tests that only read answers (its own store)."""
    where = tmp_path_factory.mktemp("shared")
    env = {
        "LOOM_APP": APP_REF,
        "LOOM_STORE": f"sqlite:///{where / 'loom.db'}",
        "LOOM_RESUME_SECRET": SECRET,
    }
    server = start_worker("shared", env, where)
    yield server
    procs.stop(server)


@pytest.fixture
def worker(workers: WorkerFactory) -> procs.Server:
    return workers()


def test_health(shared_worker: procs.Server) -> None:
    response = httpx.get(f"{url(shared_worker)}/health")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json()["healthy"] is True


async def test_straight_through_completion(
    worker: procs.Server, runtime: Runtime, side_dir: Path
) -> None:
    await aseed(runtime, "echo", {"n": 5}, "st-1")
    client = httpx.AsyncClient(headers={"X-Cloud-Trace-Context": f"{TRACE}/1;o=1"})
    remote = RemoteWorkerRuntime(url(worker) + "/", client)
    result = await remote.run(ExecutionPackage(execution_id="st-1", reason="start"))
    await client.aclose()
    assert result.status == "completed"
    assert result.output == {"echo": {"n": 5}, "doubled": 10}
    assert calls(side_dir) == ["st-1:1 t.double"]
    (line,) = [e for e in log_entries(worker) if e.get("message") == "POST /execute 200"]
    assert line["severity"] == "INFO"
    assert line["execution_id"] == "st-1"
    assert line["logging.googleapis.com/trace"] == f"projects/loom-test/traces/{TRACE}"


async def test_suspend_then_resume_on_two_different_worker_processes(
    workers: WorkerFactory, worker_env: dict[str, str], side_dir: Path
) -> None:
    """Nothing survives between the two POST /execute calls but the store: the first
    worker process is gone before the second one gets the resume."""
    first = workers("first")
    async with dispatching(worker_env["LOOM_STORE"], RemoteWorkerRuntime(url(first))) as rt:
        started = await rt.start("gated", {"n": 2}, execution_id="sr-1")
    assert started.status == "suspended"
    procs.stop(first)

    second = workers("second")
    async with dispatching(worker_env["LOOM_STORE"], RemoteWorkerRuntime(url(second))) as rt:
        done = await rt.resume("sr-1", "go", "sr-1:go", {"name": "eve"})
    assert done.status == "completed"
    assert done.output == {"greeting": "hello eve", "n": 4, "m": 8}
    assert sorted(calls(side_dir)) == ["sr-1:1 t.double", "sr-1:3 t.greet", "sr-1:4 t.double"]
    for server in (first, second):
        executed = [e for e in log_entries(server) if e.get("message") == "POST /execute 200"]
        assert [e["execution_id"] for e in executed] == ["sr-1"]


_VOLATILE = {
    "at",
    "until",
    "holder",
    "started_at",
    "updated_at",
    "wake_at",
    "effect_seconds",
    "dispatch_id",
}


def normalized(value: Any) -> Any:
    """``value`` with ids of holders and every timestamp blanked."""
    if isinstance(value, dict):
        return {k: None if k in _VOLATILE else normalized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


async def test_remote_results_equal_in_process_ones(
    worker: procs.Server, worker_env: dict[str, str], tmp_path: Path
) -> None:
    remote = Recording(RemoteWorkerRuntime(url(worker)))
    local_runtime = build_runtime(APP_REF, f"sqlite:///{tmp_path / 'local.db'}")
    local = Recording(LocalWorkerRuntime(local_runtime))
    local_runtime.dispatcher = InProcessDispatcher(local)
    async with dispatching(worker_env["LOOM_STORE"], remote) as remote_runtime:
        for runtime in (local_runtime, remote_runtime):
            await runtime.start("gated", {"n": 3}, execution_id="par-1")
            await runtime.resume("par-1", "go", "par-1:go", {"name": "flo"})
    await local_runtime.store.aclose()
    assert [r.status for r in remote.results] == ["suspended", "completed"]
    assert [normalized(r.model_dump(mode="json")) for r in remote.results] == [
        normalized(r.model_dump(mode="json")) for r in local.results
    ]
    # The wire contract round-trips: what came over HTTP re-serializes to the same JSON.
    for result in remote.results:
        assert ExecutionResult.model_validate_json(result.model_dump_json()) == result


async def _first_n(tasks: list[asyncio.Task[Any]], n: int, timeout: float) -> set[Any]:
    done: set[asyncio.Task[Any]] = set()
    pending = set(tasks)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(done) < n:
        left = deadline - loop.time()
        assert left > 0, f"only {len(done)} of {len(tasks)} answered"
        finished, pending = await asyncio.wait(
            pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
        )
        done |= finished
    return done


async def test_racing_holders_one_runs_the_others_are_superseded(
    workers: WorkerFactory, runtime: Runtime, side_dir: Path
) -> None:
    server = workers()
    await aseed(runtime, "held", "x", "race-1")
    remote = RemoteWorkerRuntime(url(server))
    package = ExecutionPackage(execution_id="race-1", reason="manual")
    tasks = [asyncio.create_task(remote.run(package)) for _ in range(4)]
    try:
        losers = await _first_n(tasks, 3, timeout=20)
        assert all(isinstance(t.exception(), ExecutionSupersededError) for t in losers)
        # While the winner holds it, a dispatcher over the remote worker is refused too, and
        # does not try again.
        dispatcher = InProcessDispatcher(remote)
        await dispatcher.dispatch(package, "race-1:again")
        assert dispatcher.superseded == ["race-1"]
        async with httpx.AsyncClient() as raw:
            answer = await raw.post(
                remote.execute_url, json={"executionPackage": {"execution_id": "race-1"}}
            )
        assert answer.status_code == 409
        assert answer.json()["code"] == "superseded"
    finally:
        (side_dir / "release").touch()
    (winner,) = set(tasks) - losers
    result = await asyncio.wait_for(winner, 20)
    assert result.status == "completed"
    assert result.output == {"first": "released", "second": 42}
    events = await runtime.history("race-1")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sum(isinstance(e, ev.ExecutionClaimed) for e in events) == 1
    assert sorted(calls(side_dir)) == ["race-1:1 t.hold", "race-1:2 t.double"]
    await remote.aclose()


async def test_a_worker_killed_mid_charge_parks_in_doubt_and_a_verdict_settles_it(
    workers: WorkerFactory, runtime: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_CRASH_AT="after_intent")
    await aseed(runtime, "pay", 9, "crash-1")
    remote = RemoteWorkerRuntime(url(server))
    package = ExecutionPackage(execution_id="crash-1")
    with pytest.raises(WorkerError):
        await remote.run(package)  # the worker process died mid-request
    parked = await remote.run(package)  # gunicorn's next worker process rebuilds
    assert parked.status == "in_doubt"
    assert [d.step_id for d in parked.in_doubt] == ["1"]
    body = {
        "step_id": "1",
        "episode": parked.in_doubt[0].episode,
        "verdict": "performed",
        "by": "ops",
        "output": {"charge_id": "ch_manual", "amount": 9},
    }
    async with httpx.AsyncClient(base_url=url(server)) as client:
        refused = await client.post("/executions/crash-1/verdict", json=body)
        assert refused.status_code == 401
        response = await client.post("/executions/crash-1/verdict", json=body, headers=BEARER)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"
    assert calls(side_dir) == []  # the charge was never invoked, and never silently retried
    await remote.aclose()


def _chunks(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), 65536):
        yield data[start : start + 65536]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        (
            "POST",
            "/execute",
            {"content": b"{nope", "headers": {"content-type": "application/json"}},
            400,
            "malformed_json",
        ),
        ("POST", "/executions", {"json": {"flow": "no.such.flow"}}, 404, "unknown_flow"),
        (
            "POST",
            "/execute",
            {"json": {"executionPackage": {"execution_id": "ghost"}}},
            404,
            "unknown_execution",
        ),
        ("GET", "/executions/ghost", {}, 404, "unknown_execution"),
        ("POST", "/executions", {"json": {"flow": "x" * (2 * 1024 * 1024)}}, 413, "too_large"),
        (
            "POST",
            "/executions",
            {
                "content": _chunks(b'{"flow": "' + b"x" * 2_000_000 + b'"}'),
                "headers": {"content-type": "application/json"},
            },
            413,
            "too_large",
        ),
        (
            "POST",
            "/executions",
            {"content": b"{}", "headers": {"content-type": "text/plain"}},
            415,
            "unsupported_media_type",
        ),
        ("GET", "/executions/a%0Ab", {}, 404, "not_found"),
        ("PATCH", "/execute", {}, 405, "method_not_allowed"),
    ],
    ids=[
        "malformed",
        "unknown-flow",
        "unknown-execution",
        "get-unknown",
        "too-large",
        "too-large-chunked",
        "wrong-type",
        "unroutable",
        "wrong-method",
    ],
)
def test_bad_input_over_http(
    shared_worker: procs.Server,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    code: str,
) -> None:
    response = httpx.request(method, url(shared_worker) + path, timeout=30, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == ERROR_KEYS
    assert body["code"] == code


@pytest.fixture(scope="module")
def live_api_schema(shared_worker: procs.Server) -> Any:
    """The document as the real server serves it, bound to that server."""
    return schemathesis.openapi.from_url(f"{url(shared_worker)}/openapi.json")


live_schema = schemathesis.pytest.from_fixture("live_api_schema")


@live_schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_fuzzed_requests_over_real_http_never_get_a_5xx(case: schemathesis.Case) -> None:
    case.call_and_validate(
        headers=BEARER if "/executions/{" in case.path and case.method == "POST" else None,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
