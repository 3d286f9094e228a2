"""``CloudRunWorkerRuntime``: the real ``google-cloud-run`` client against the fake Admin API,
real ``google-auth`` ID tokens from a local token endpoint, and a scripted worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from google.auth import jwt
from google.cloud import run_v2

from loom.errors import ConfigurationError, ExecutionSupersededError, RemoteWorkerError
from loom.wire import ExecutionPackage, ExecutionResult
from loom_gcp.cloud_run import (
    CloudRunWorkerRuntime,
    IdTokenSource,
    ServiceNotReadyError,
    parse_service_url,
)
from tests import procs
from tests.gcp.fakes.cloud_run_admin import FakeCloudRunAdmin
from tests.gcp_emulators import IdTokenServer

NAME = "projects/loom-test/locations/europe-west1/services/loom-worker"
URL = "https://loom-worker-abc123-ew.a.run.app"
PACKAGE = ExecutionPackage(execution_id="e1", flow="f", reason="start")
RESULT = ExecutionResult(execution_id="e1", flow="f", status="completed", last_seq=4, output=7)


class Worker:
    """A scripted Cloud Run service: answers ``script`` in order, then the result."""

    def __init__(self, *script: tuple[int, dict[str, Any]]) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.script:
            status, body = self.script.pop(0)
            return httpx.Response(status, json=body)
        return httpx.Response(200, content=RESULT.model_dump_json())

    def audiences(self) -> list[str]:
        tokens = [r.headers["authorization"].removeprefix("Bearer ") for r in self.requests]
        return [jwt.decode(t, verify=False)["aud"] for t in tokens]


def runtime(
    admin: FakeCloudRunAdmin, worker: Worker, sleeps: list[float] | None = None, **kw: Any
) -> CloudRunWorkerRuntime:
    async def sleep(seconds: float) -> None:
        (sleeps if sleeps is not None else []).append(seconds)

    return CloudRunWorkerRuntime(
        NAME,
        services_client=admin.client(),
        client=httpx.AsyncClient(transport=httpx.MockTransport(worker)),
        sleep=sleep,
        **kw,
    )


async def test_it_resolves_the_url_and_sends_an_id_token_for_that_audience(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    cloud_run_admin.put(NAME, URL + "/")
    worker = Worker()
    rt = runtime(cloud_run_admin, worker)
    result = await rt.run(PACKAGE)
    assert result == RESULT
    [request] = worker.requests
    assert str(request.url) == f"{URL}/execute"
    assert worker.audiences() == [URL]
    [claims] = id_token_server.issued
    assert claims["email"] == id_token_server.email
    assert cloud_run_admin.calls == [NAME]
    # The real client sent its routing header: the fake served a real request.
    assert cloud_run_admin.metadata[0]["x-goog-request-params"] == "location=europe-west1"
    await rt.aclose()


async def test_the_url_and_the_token_are_reused_while_fresh(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    cloud_run_admin.put(NAME, URL)
    worker = Worker()
    rt = runtime(cloud_run_admin, worker)
    for _ in range(3):
        await rt.run(PACKAGE)
    assert len(worker.requests) == 3
    assert len(id_token_server.issued) == 1
    assert cloud_run_admin.calls == [NAME]
    await rt.aclose()


async def test_a_token_near_expiry_is_refreshed(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    id_token_server.lifetime = 60  # inside google-auth's refresh margin: never "valid"
    cloud_run_admin.put(NAME, URL)
    rt = runtime(cloud_run_admin, Worker())
    await rt.run(PACKAGE)
    await rt.run(PACKAGE)
    assert len(id_token_server.issued) == 2
    await rt.aclose()


async def test_a_service_whose_url_serves_no_ready_revision_is_refused_before_any_call(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    """A brand-new service whose first deploy is still rolling out (or failed)."""
    cloud_run_admin.put(NAME, URL, ready=False, generation=1, observed_generation=0)
    worker = Worker()
    rt = runtime(cloud_run_admin, worker)
    with pytest.raises(ServiceNotReadyError, match="no ready revision serves"):
        await rt.run(PACKAGE)
    assert worker.requests == []
    cloud_run_admin.put(NAME, URL, generation=1)  # the first rollout finished: not cached
    assert await rt.run(PACKAGE) == RESULT
    await rt.aclose()


@pytest.mark.parametrize(
    ("state", "observed", "traffic"),
    [
        # generation 3 is rolling out; traffic still goes to the last ready revision
        (run_v2.Condition.State.CONDITION_RECONCILING, 2, [("", 100)]),
        # the newest generation is observed but its revision is not ready yet
        (run_v2.Condition.State.CONDITION_RECONCILING, 3, [("", 100)]),
        # the deploy of generation 3 failed: the URL keeps serving revision 2
        (run_v2.Condition.State.CONDITION_FAILED, 3, [("", 100)]),
        # a gradual rollout pinned to revisions, the new one taking no traffic yet
        (run_v2.Condition.State.CONDITION_SUCCEEDED, 3, [("loom-worker-00002", 100)]),
    ],
)
async def test_a_rollout_or_a_failed_deploy_keeps_serving_through_the_url(
    cloud_run_admin: FakeCloudRunAdmin,
    id_token_server: IdTokenServer,
    state: run_v2.Condition.State,
    observed: int,
    traffic: list[tuple[str, int]],
) -> None:
    cloud_run_admin.put(
        NAME,
        URL,
        generation=3,
        observed_generation=observed,
        state=state,
        latest_ready_revision="loom-worker-00002",
        traffic=traffic,
    )
    worker = Worker()
    rt = runtime(cloud_run_admin, worker)
    assert await rt.run(PACKAGE) == RESULT
    assert [str(r.url) for r in worker.requests] == [f"{URL}/execute"]
    await rt.aclose()


async def test_no_ready_revision_or_no_url_is_refused(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    cloud_run_admin.put(NAME, URL, ready=False, latest_ready_revision="", traffic=[("", 100)])
    with pytest.raises(ServiceNotReadyError):
        await runtime(cloud_run_admin, Worker()).run(PACKAGE)
    cloud_run_admin.put(NAME, "", generation=1)
    with pytest.raises(ServiceNotReadyError, match="no URL"):
        await runtime(cloud_run_admin, Worker()).run(PACKAGE)


async def test_an_unknown_service_is_a_configuration_error(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    rt = runtime(cloud_run_admin, Worker())
    with pytest.raises(ConfigurationError, match="cannot read Cloud Run service") as info:
        await rt.run(PACKAGE)
    assert "NotFound" in type(info.value.__cause__).__name__
    await rt.aclose()


async def test_cold_start_answers_are_retried_with_growing_backoff(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    cloud_run_admin.put(NAME, URL)
    worker = Worker((429, {}), (503, {}), (503, {}))
    sleeps: list[float] = []
    rt = runtime(cloud_run_admin, worker, sleeps, backoff=1.0, max_backoff=3.0)
    assert await rt.run(PACKAGE) == RESULT
    assert len(worker.requests) == 4
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0 and 1.5 <= sleeps[2] <= 3.0
    await rt.aclose()


async def test_retries_stop_after_the_last_attempt(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer
) -> None:
    cloud_run_admin.put(NAME, URL)
    worker = Worker(*[(503, {"code": "unavailable"})] * 5)
    rt = runtime(cloud_run_admin, worker, attempts=3)
    with pytest.raises(RemoteWorkerError) as info:
        await rt.run(PACKAGE)
    assert info.value.status == 503
    assert len(worker.requests) == 3
    await rt.aclose()


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (409, {"code": "superseded", "message": "held", "details": {}}, ExecutionSupersededError),
        (500, {"code": "internal"}, RemoteWorkerError),
        (403, {}, RemoteWorkerError),
    ],
)
async def test_other_answers_behave_as_the_plain_remote_runtime_without_retry(
    cloud_run_admin: FakeCloudRunAdmin,
    id_token_server: IdTokenServer,
    status: int,
    body: dict[str, Any],
    error: type[Exception],
) -> None:
    cloud_run_admin.put(NAME, URL)
    worker = Worker((status, body))
    rt = runtime(cloud_run_admin, worker)
    with pytest.raises(error):
        await rt.run(PACKAGE)
    assert len(worker.requests) == 1
    await rt.aclose()


def test_without_usable_credentials_no_token_is_minted(
    offline_google_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigurationError, match="no credentials"):
        IdTokenSource().token(URL)


def test_service_urls_are_checked() -> None:
    assert parse_service_url(f"cloudrun://{NAME}") == NAME
    for bad in ("cloudrun://projects/p/services/s", f"https://{NAME}", "cloudrun://x"):
        with pytest.raises(ConfigurationError):
            parse_service_url(bad)


@pytest.mark.slow
async def test_it_runs_an_execution_on_a_real_worker_process(
    cloud_run_admin: FakeCloudRunAdmin, id_token_server: IdTokenServer, tmp_path: Path
) -> None:
    from loom.runtime import Runtime
    from loom.store.sqlite import SqliteEventStore
    from tests.functions.apps import app
    from tests.functions.conftest import start_worker

    db = tmp_path / "loom.db"
    env = {"LOOM_APP": "tests.functions.apps:app", "LOOM_STORE": f"sqlite:///{db}"}
    server = start_worker("worker", env, tmp_path)
    seeded = Runtime(app, SqliteEventStore(db))
    try:
        await seeded.start("echo", {"n": 5}, execution_id="cr-1", run=False)
        cloud_run_admin.put(NAME, f"http://{server.host}")
        rt = CloudRunWorkerRuntime(NAME, services_client=cloud_run_admin.client())
        result = await rt.run(ExecutionPackage(execution_id="cr-1", reason="start"))
        assert (result.status, result.output) == ("completed", {"echo": {"n": 5}, "doubled": 10})
        assert id_token_server.issued[0]["aud"] == f"http://{server.host}"
        await rt.aclose()
    finally:
        await seeded.store.aclose()
        procs.stop(server)
