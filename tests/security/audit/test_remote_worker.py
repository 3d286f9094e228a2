"""The HTTP worker and its client under attack: a tampered execution package, and a worker
(or something between it and its caller) answering with another execution's result.

``POST /execute`` is the ``worker`` target as functions-framework builds it. The lying
worker is a stand-in (an ``httpx.MockTransport``), since a real worker never lies; what it
answers is a real result, made by the real worker for another execution.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from loom.errors import RemoteWorkerError
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from loom.workers.remote import RemoteWorkerRuntime
from tests.functions.apps import calls
from tests.functions.helpers import history, seed
from tests.security.audit.helpers import JSON, refused


def execute(client: FlaskClient, package: object) -> TestResponse:
    return client.post("/execute", data=json.dumps({"executionPackage": package}), headers=JSON)


def test_a_package_naming_another_flow_runs_the_recorded_one(
    client: FlaskClient, runtime: Runtime, side_dir: Path
) -> None:
    """Attack: an execution package that names another flow (a non-idempotent ``pay`` for
    an ``echo`` execution). Promise: the worker runs what the log records, never what the
    package claims."""
    seed(runtime, "echo", {"n": 2}, "e-1")
    answer = execute(client, {"execution_id": "e-1", "flow": "pay", "reason": "verdict"})
    assert answer.status_code == 200 and answer.json is not None
    assert answer.json["flow"] == "echo"
    assert answer.json["output"] == {"echo": {"n": 2}, "doubled": 4}
    assert calls(side_dir) == ["e-1:1 t.double"]


@pytest.mark.parametrize(
    ("package", "status", "code"),
    [
        ({"execution_id": "e-1", "extra": True}, 400, "invalid_request"),
        ({"execution_id": 7}, 400, "invalid_request"),
        ({"execution_id": ["e-1"]}, 400, "invalid_request"),
        ({"execution_id": "e-1", "reason": "admin"}, 400, "invalid_request"),
        ({"execution_id": "../e-1"}, 400, "invalid_execution_id"),
        ({"execution_id": "e-1\r\nX-Injected: 1"}, 400, "invalid_execution_id"),
        ({"execution_id": "e" * 256}, 400, "invalid_execution_id"),
        ({"execution_id": "never-started"}, 404, "unknown_execution"),
        ("e-1", 400, "invalid_request"),
    ],
)
def test_a_tampered_package_is_refused_and_runs_nothing(
    client: FlaskClient,
    runtime: Runtime,
    side_dir: Path,
    package: object,
    status: int,
    code: str,
) -> None:
    """Attack: packages with extra fields, wrong types, an unknown reason, ids carrying a
    path or a header injection, an id never started. Promise: the status and code naming
    what is wrong, and nothing run or appended."""
    seed(runtime, "echo", {"n": 2}, "e-1")
    before = history(runtime, "e-1")
    refused(execute(client, package), status, code)
    assert history(runtime, "e-1") == before
    assert calls(side_dir) == []


def test_a_result_for_another_execution_is_refused_by_the_client(
    client: FlaskClient, runtime: Runtime
) -> None:
    """Attack: the worker answers a package for ``mine`` with the result of ``theirs``
    (misrouted, or rewritten on the way). Promise: ``RemoteWorkerRuntime`` raises
    ``RemoteWorkerError`` naming both executions instead of passing another execution's
    state off as this one's; the answer for the right execution is accepted."""
    seed(runtime, "echo", {"n": 1}, "mine")
    seed(runtime, "gated", {"n": 5}, "theirs")
    theirs = execute(client, {"execution_id": "theirs"})
    assert theirs.status_code == 200
    foreign = theirs.data

    def lying(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=foreign, headers=JSON)

    async def go() -> None:
        worker = RemoteWorkerRuntime(
            "http://worker.test", httpx.AsyncClient(transport=httpx.MockTransport(lying))
        )
        with pytest.raises(RemoteWorkerError) as caught:
            await worker.run(ExecutionPackage(execution_id="mine"))
        assert "'theirs'" in caught.value.message and "'mine'" in caught.value.message
        assert caught.value.status == 200
        answered = execute(client, {"execution_id": "mine"}).data

        def honest(request: httpx.Request) -> httpx.Response:
            assert json.loads(request.content)["executionPackage"]["execution_id"] == "mine"
            return httpx.Response(200, content=answered, headers=JSON)

        worker = RemoteWorkerRuntime(
            "http://worker.test", httpx.AsyncClient(transport=httpx.MockTransport(honest))
        )
        result = await worker.run(ExecutionPackage(execution_id="mine"))
        assert (result.execution_id, result.status) == ("mine", "completed")

    asyncio.run(go())
