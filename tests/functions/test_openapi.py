"""The OpenAPI document: valid, served, matching real answers, and fuzzed with schemathesis."""

from __future__ import annotations

import json
from typing import Any

import functions_framework
import pytest
import schemathesis
from flask.testing import FlaskClient
from hypothesis import HealthCheck, settings
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from loom.runtime import Runtime
from loom.workers.openapi import document
from tests.functions.conftest import BEARER, MAIN
from tests.functions.helpers import seed_in_doubt


def test_the_document_is_valid_openapi_3_1() -> None:
    validate(document())  # raises on an invalid document


def test_it_is_served(client: FlaskClient) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.json == json.loads(json.dumps(document()))


def _check(path: str, method: str, response: Any) -> None:
    """``response`` has a documented status and a body that fits its documented schema."""
    operation = document()["paths"][path][method]
    documented = operation["responses"]
    assert str(response.status_code) in documented, (path, method, response.status_code)
    schema = documented[str(response.status_code)]["content"]["application/json"]["schema"]
    # Refs point into the document: validate with the components at the root.
    validator = Draft202012Validator({**schema, "components": document()["components"]})
    errors = sorted(validator.iter_errors(response.json), key=str)
    assert not errors, [e.message for e in errors]


def test_real_answers_fit_the_document(client: FlaskClient, runtime: Runtime) -> None:
    seen: set[tuple[str, str, int]] = set()

    def check(path: str, method: str, response: Any) -> None:
        _check(path, method, response)
        seen.add((path, method, response.status_code))

    check("/health", "get", client.get("/health"))
    check("/health", "get", client.post("/health"))
    check("/live", "get", client.get("/live"))
    check("/live", "get", client.post("/live"))
    check("/openapi.json", "get", client.get("/openapi.json"))
    start = {"flow": "gated", "input": {"n": 1}, "execution_id": "o-1"}
    check("/executions", "post", client.post("/executions", json=start))
    check("/executions", "post", client.post("/executions", json={**start, "input": {"n": 2}}))
    check("/executions", "post", client.post("/executions", json={"flow": "nope"}))
    check("/executions", "post", client.post("/executions", data="{", content_type="text/x"))
    check(
        "/executions", "post", client.post("/executions", data="{", content_type="application/json")
    )
    check("/executions/{execution_id}", "get", client.get("/executions/o-1"))
    check("/executions/{execution_id}", "get", client.get("/executions/zz"))
    resume = {"on": "go", "correlation_key": "o-1:go", "payload": {"name": "di"}}
    path = "/executions/{execution_id}/resume"
    check(path, "post", client.post("/executions/o-1/resume", json=resume))
    check(
        path,
        "post",
        client.post(
            "/executions/o-1/resume",
            json=resume,
            headers={"Authorization": "Bearer nope-nope-nope"},
        ),
    )
    check(path, "post", client.post("/executions/o-1/resume", json=resume, headers=BEARER))
    check("/executions/{execution_id}", "get", client.get("/executions/o-1"))
    check(path, "post", client.post("/executions/o-1/resume", json=resume, headers=BEARER))
    seed_in_doubt(runtime, "o-2")
    check(
        "/execute",
        "post",
        client.post("/execute", json={"executionPackage": {"execution_id": "o-2"}}),
    )
    check(
        "/execute",
        "post",
        client.post("/execute", json={"executionPackage": {"execution_id": "zz"}}),
    )
    verdict = {"step_id": "1", "episode": 3, "verdict": "not_performed"}
    path = "/executions/{execution_id}/verdict"
    check(
        path, "post", client.post("/executions/o-2/verdict", json={"step_id": "1"}, headers=BEARER)
    )
    check(path, "post", client.post("/executions/o-2/verdict", json=verdict, headers=BEARER))
    check("/executions/{execution_id}", "get", client.get("/executions/o-2"))
    statuses = {status for _, _, status in seen}
    assert statuses >= {200, 400, 401, 403, 404, 405, 409, 415}


@pytest.fixture
def api_schema(worker_env: dict[str, str]) -> Any:
    """The served document, bound to the ``worker`` target's WSGI app."""
    app = functions_framework.create_app("worker", str(MAIN))
    return schemathesis.openapi.from_wsgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_fuzzed_requests_never_get_a_5xx(case: schemathesis.Case) -> None:
    """Generated from the document (valid and invalid data): no 5xx, and answers conform."""
    case.call_and_validate(
        headers=BEARER if "/executions/{" in case.path and case.method == "POST" else None,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
