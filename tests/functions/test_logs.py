"""Structured logs: Cloud Logging JSON lines with severity, message, ids and trace."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from flask.testing import FlaskClient

from loom.errors import StoreError
from loom.runtime import Runtime
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.base import WorkerRuntime
from loom.workers.logs import (
    SPAN_KEY,
    TRACE_KEY,
    CloudLoggingFormatter,
    configure_logging,
    log_context,
    trace_fields,
)
from loom.workers.server import WorkerHandler, build_runtime, create_wsgi_app
from tests.functions.conftest import APP_REF
from tests.functions.helpers import assert_error

TRACE = "105445aa7843bc8bf206b12000100000"


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_trace_from_cloud_run_header() -> None:
    fields = trace_fields({"X-Cloud-Trace-Context": f"{TRACE}/1;o=1"}, project="p")
    assert fields == {
        TRACE_KEY: f"projects/p/traces/{TRACE}",
        SPAN_KEY: "1",
        "logging.googleapis.com/trace_sampled": True,
    }


def test_trace_from_traceparent_without_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.delenv("GCP_PROJECT", raising=False)
    fields = trace_fields({"traceparent": f"00-{TRACE}-00f067aa0ba902b7-00"})
    assert fields[TRACE_KEY] == TRACE
    assert fields[SPAN_KEY] == "00f067aa0ba902b7"
    assert fields["logging.googleapis.com/trace_sampled"] is False


@pytest.mark.parametrize(
    "headers", [{}, {"X-Cloud-Trace-Context": "nonsense"}, {"traceparent": "00-short-01"}]
)
def test_no_trace(headers: dict[str, str]) -> None:
    assert trace_fields(headers, project="p") == {}


def test_formatter_fields() -> None:
    record = logging.LogRecord("loom.worker", logging.WARNING, __file__, 1, "step %s", ("3",), None)
    record.step_id = "3"
    with log_context(execution_id="e-1", **{TRACE_KEY: "projects/p/traces/t"}):
        entry = json.loads(CloudLoggingFormatter().format(record))
    assert entry["severity"] == "WARNING"
    assert entry["message"] == "step 3"
    assert entry["execution_id"] == "e-1"
    assert entry["step_id"] == "3"
    assert entry[TRACE_KEY] == "projects/p/traces/t"
    assert entry["time"].endswith("+00:00")


def test_configure_logging_is_idempotent() -> None:
    first = configure_logging()
    assert configure_logging() is first
    assert logging.getLogger("loom").handlers.count(first) == 1


def test_request_lines_carry_execution_step_and_trace(
    client: FlaskClient, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "loom-test")
    capsys.readouterr()
    response = client.post(
        "/executions",
        json={"flow": "gated", "input": {}, "execution_id": "l-1"},
        headers={"X-Cloud-Trace-Context": f"{TRACE}/7;o=1"},
    )
    assert response.status_code == 200
    (line,) = [e for e in _lines(capsys.readouterr().err) if e.get("logger") == "loom.worker"]
    assert line["severity"] == "INFO"
    assert line["message"] == "POST /executions 200"
    assert line["execution_id"] == "l-1"
    assert line["status"] == "suspended"
    assert line["step_id"] == "2"  # the gate it waits on
    assert line[TRACE_KEY] == f"projects/loom-test/traces/{TRACE}"
    assert line["httpRequest"]["status"] == 200


class _Broken(WorkerRuntime):
    async def allocate(self, package: ExecutionPackage) -> Any:
        return None

    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        raise RuntimeError("disk on fire")

    async def release(self, handle: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("error", "status"), [(RuntimeError("disk on fire"), 500), (StoreError("store down"), 503)]
)
def test_an_internal_error_is_5xx_with_an_error_id_in_the_log(
    worker_env: dict[str, str], capsys: pytest.CaptureFixture[str], error: Exception, status: int
) -> None:
    """A store failure is 503 (retry later), anything unexpected 500; both are logged."""

    class Failing(_Broken):
        async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
            raise error

    runtime: Runtime = build_runtime(APP_REF, worker_env["LOOM_STORE"])
    handler = WorkerHandler(runtime, worker=Failing())
    configure_logging()
    client = create_wsgi_app(handler).test_client()  # the `loom serve` app
    capsys.readouterr()
    response = client.post("/execute", json={"executionPackage": {"execution_id": "z"}})
    body = assert_error(response, status)
    assert ("Retry-After" in response.headers) == (status == 503)
    error_id = body["details"]["error_id"]
    assert "disk on fire" not in body["message"]  # internals stay in the log
    lines = [e for e in _lines(capsys.readouterr().err) if e.get("error_id") == error_id]
    assert {e["severity"] for e in lines} == {"ERROR"}
    assert any(type(error).__name__ in e.get("stack_trace", "") for e in lines)
    assert all(e["execution_id"] == "z" for e in lines)
