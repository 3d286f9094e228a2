"""The worker's HTTP routes through the ``worker`` target (functions-framework test client)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient

import loom
from loom.events import EffectVerdict, ExecutionResumed
from loom.runtime import Runtime
from loom.workers.auth import BearerTokenAuth, Forbidden, sign
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, SECRET
from tests.functions.helpers import assert_error, history, seed, seed_in_doubt


def test_health(client: FlaskClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json == {"healthy": True, "version": loom.__version__}


def test_a_broken_app_is_unhealthy_and_a_500_with_an_error_id(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_APP", "tests.functions.no_such_module:app")
    health = client.get("/health")
    assert health.status_code == 503
    assert health.json is not None and health.json["healthy"] is False
    assert health.json["error"]["code"] == "configuration"
    body = assert_error(client.post("/executions", json={"flow": "echo"}), 500, "configuration")
    assert len(body["details"]["error_id"]) == 32


def test_start_runs_straight_through_and_is_idempotent(client: FlaskClient, side_dir: Path) -> None:
    request = {"flow": "echo", "input": {"n": 4}, "execution_id": "s-1"}
    first = client.post("/executions", json=request)
    assert first.status_code == 200, first.json
    assert first.json is not None
    assert first.json["status"] == "completed"
    assert first.json["output"] == {"echo": {"n": 4}, "doubled": 8}
    again = client.post("/executions", json=request)
    assert again.status_code == 200
    assert again.json == first.json
    assert calls(side_dir) == ["s-1:1 t.double"]


def test_start_generates_an_id(client: FlaskClient) -> None:
    response = client.post("/executions", json={"flow": "echo", "input": {}})
    assert response.status_code == 200
    assert response.json is not None and len(response.json["execution_id"]) >= 32


def test_start_errors(client: FlaskClient) -> None:
    client.post("/executions", json={"flow": "echo", "input": {"n": 1}, "execution_id": "c-1"})
    conflict = client.post(
        "/executions", json={"flow": "echo", "input": {"n": 2}, "execution_id": "c-1"}
    )
    assert_error(conflict, 409, "conflict")
    unknown = client.post("/executions", json={"flow": "nope", "input": None})
    assert_error(unknown, 404, "unknown_flow")
    invalid = client.post("/executions", json={"flow": "echo", "input": "not a dict"})
    assert_error(invalid, 400, "invalid_payload")
    extra = client.post("/executions", json={"flow": "echo", "surprise": 1})
    body = assert_error(extra, 400, "invalid_request")
    assert body["details"]["errors"][0]["loc"] == ["surprise"]


def _suspended(client: FlaskClient, eid: str) -> dict[str, Any]:
    response = client.post(
        "/executions", json={"flow": "gated", "input": {"n": 3}, "execution_id": eid}
    )
    assert response.status_code == 200
    assert response.json is not None and response.json["status"] == "suspended"
    return response.json


def test_resume_with_bearer_completes(client: FlaskClient, side_dir: Path) -> None:
    state = _suspended(client, "r-1")
    assert [(g["on"], g["correlation_key"]) for g in state["waiting_on"]] == [("go", "r-1:go")]
    body = {"on": "go", "correlation_key": "r-1:go", "payload": {"name": "ann"}}
    response = client.post("/executions/r-1/resume", json=body, headers=BEARER)
    assert response.status_code == 200, response.json
    assert response.json is not None
    assert response.json["status"] == "completed"
    assert response.json["output"] == {"greeting": "hello ann", "n": 6, "m": 12}
    assert sorted(calls(side_dir)) == ["r-1:1 t.double", "r-1:3 t.greet", "r-1:4 t.double"]


def test_resume_with_an_hmac_signature(client: FlaskClient) -> None:
    _suspended(client, "h-1")
    raw = json.dumps({"on": "go", "correlation_key": "h-1:go", "payload": {"name": "bo"}})
    headers = {
        "X-Loom-Signature": sign(SECRET, "resume", "h-1", raw.encode()),
        "Content-Type": "application/json",
    }
    response = client.post("/executions/h-1/resume", data=raw, headers=headers)
    assert response.status_code == 200, response.json
    assert response.json is not None and response.json["status"] == "completed"


RESUME_RAW = b'{"on": "go", "correlation_key": "u-1:go"}'
JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "unauthenticated"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, "unauthenticated"),
        ({"Authorization": "Bearer wrong-secret-123456"}, 403, "forbidden"),
        ({"X-Loom-Signature": "sha256=" + "0" * 64}, 403, "forbidden"),
        # A valid signature for another execution, another body or a verdict does not pass.
        ({"X-Loom-Signature": sign(SECRET, "resume", "other", RESUME_RAW)}, 403, "forbidden"),
        ({"X-Loom-Signature": sign(SECRET, "resume", "u-1", b"{}")}, 403, "forbidden"),
        ({"X-Loom-Signature": sign(SECRET, "verdict", "u-1", RESUME_RAW)}, 403, "forbidden"),
    ],
)
def test_unauthenticated_resume_appends_nothing(
    client: FlaskClient, runtime: Runtime, headers: dict[str, str], status: int, code: str
) -> None:
    _suspended(client, "u-1")
    before = history(runtime, "u-1")
    response = client.post("/executions/u-1/resume", data=RESUME_RAW, headers={**JSON, **headers})
    assert_error(response, status, code)
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert history(runtime, "u-1") == before
    signed = {"X-Loom-Signature": sign(SECRET, "resume", "u-1", RESUME_RAW)}
    accepted = client.post("/executions/u-1/resume", data=RESUME_RAW, headers={**JSON, **signed})
    assert accepted.status_code == 200  # the same request, signed right, goes through


def test_resume_errors(client: FlaskClient) -> None:
    body = {"on": "go", "correlation_key": "x"}
    assert_error(
        client.post("/executions/none/resume", json=body, headers=BEARER), 404, "unknown_execution"
    )
    _suspended(client, "e-1")
    assert_error(
        client.post("/executions/e-1/resume", json={"on": "go"}, headers=BEARER),
        400,
        "invalid_request",
    )
    client.post(
        "/executions/e-1/resume", json={"on": "go", "correlation_key": "e-1:go"}, headers=BEARER
    )
    late = {"on": "other", "correlation_key": "k"}
    assert_error(client.post("/executions/e-1/resume", json=late, headers=BEARER), 409, "finished")


def test_an_early_resume_is_buffered(client: FlaskClient, runtime: Runtime) -> None:
    seed(runtime, "gated", {"n": 1}, "b-1")
    body = {"on": "go", "correlation_key": "b-1:go", "payload": {"name": "cy"}}
    response = client.post("/executions/b-1/resume", json=body, headers=BEARER)
    assert response.status_code == 200
    assert response.json is not None and response.json["status"] == "completed"
    assert response.json["output"]["greeting"] == "hello cy"
    assert sum(isinstance(e, ExecutionResumed) for e in history(runtime, "b-1")) == 1


def test_verdict_needs_auth_and_records_who(
    client: FlaskClient, runtime: Runtime, side_dir: Path
) -> None:
    seed_in_doubt(runtime, "v-1", amount=7)
    parked = client.post("/execute", json={"executionPackage": {"execution_id": "v-1"}})
    assert parked.status_code == 200
    assert parked.json is not None and parked.json["status"] == "in_doubt"
    assert parked.json["in_doubt"][0]["step_id"] == "1"
    before = history(runtime, "v-1")
    body = {
        "step_id": "1",
        "episode": parked.json["in_doubt"][0]["episode"],
        "verdict": "performed",
        "output": {"charge_id": "ch_x", "amount": 7},
        "by": "alice",
    }
    assert_error(client.post("/executions/v-1/verdict", json=body), 401, "unauthenticated")
    assert history(runtime, "v-1") == before
    response = client.post("/executions/v-1/verdict", json=body, headers=BEARER)
    assert response.status_code == 200, response.json
    assert response.json is not None and response.json["status"] == "completed"
    assert response.json["output"] == {"receipt": {"charge_id": "ch_x", "amount": 7}}
    verdicts = [e for e in history(runtime, "v-1") if isinstance(e, EffectVerdict)]
    assert [v.by for v in verdicts] == ["alice (via shared-secret)"]
    assert calls(side_dir) == []  # in doubt means never invoked again silently


def test_verdict_errors(client: FlaskClient, runtime: Runtime) -> None:
    seed_in_doubt(runtime, "v-2")
    parked = client.post("/execute", json={"executionPackage": {"execution_id": "v-2"}}).json
    assert parked is not None
    ep = parked["in_doubt"][0]["episode"]
    wrong_step = {"step_id": "9", "episode": ep, "verdict": "not_performed"}
    assert_error(
        client.post("/executions/v-2/verdict", json=wrong_step, headers=BEARER), 400, "not_in_doubt"
    )
    bad_verdict = {"step_id": "1", "episode": ep, "verdict": "maybe"}
    assert_error(
        client.post("/executions/v-2/verdict", json=bad_verdict, headers=BEARER),
        400,
        "invalid_request",
    )
    bad_output = {"step_id": "1", "episode": ep, "verdict": "performed", "output": "x"}
    assert_error(
        client.post("/executions/v-2/verdict", json=bad_output, headers=BEARER),
        400,
        "invalid_output",
    )
    unknown = {"step_id": "1", "episode": ep, "verdict": "failed"}
    assert_error(client.post("/executions/zz/verdict", json=unknown, headers=BEARER), 404)


def test_with_no_secret_resume_and_verdict_are_refused(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOM_RESUME_SECRET")
    _suspended(client, "n-1")
    body = {"on": "go", "correlation_key": "n-1:go"}
    response = client.post("/executions/n-1/resume", json=body, headers=BEARER)
    assert "LOOM_RESUME_SECRET" in assert_error(response, 403, "forbidden")["message"]


def only_alice(token: str) -> str:
    """A stand-in for OIDC verification: one token names alice."""
    if token != "token-of-alice":
        raise Forbidden("not a token of ours")
    return "alice@example.com"


verify_alice = BearerTokenAuth(only_alice)


def test_a_plugged_authenticator(
    client: FlaskClient, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_VERDICT_AUTH", "tests.functions.test_routes:verify_alice")
    seed_in_doubt(runtime, "p-1")
    parked = client.post("/execute", json={"executionPackage": {"execution_id": "p-1"}}).json
    assert parked is not None
    ep = parked["in_doubt"][0]["episode"]
    body = {"step_id": "1", "episode": ep, "verdict": "failed", "error": "the bank said no"}
    refused = client.post("/executions/p-1/verdict", json=body, headers=BEARER)
    assert_error(refused, 403, "forbidden")
    ok = client.post(
        "/executions/p-1/verdict", json=body, headers={"Authorization": "Bearer token-of-alice"}
    )
    assert ok.status_code == 200, ok.json
    assert ok.json is not None and ok.json["status"] == "failed"
    verdicts = [e for e in history(runtime, "p-1") if isinstance(e, EffectVerdict)]
    assert [(v.verdict, v.by) for v in verdicts] == [("failed", "alice@example.com")]


def test_get_execution_has_state_and_gap_free_history(client: FlaskClient) -> None:
    _suspended(client, "g-1")
    response = client.get("/executions/g-1")
    assert response.status_code == 200
    body = response.json
    assert body is not None
    assert body["execution"]["status"] == "suspended"
    seqs = [e["seq"] for e in body["history"]]
    assert seqs == list(range(1, body["execution"]["last_seq"] + 1))
    assert body["history"][0]["type"] == "ExecutionStarted"
    brief = client.get("/executions/g-1?history=false")
    assert brief.json is not None and brief.json["history"] == []
    assert brief.json["execution"] == body["execution"]
    assert_error(client.get("/executions/g-1?history=maybe"), 400, "invalid_request")
    assert_error(client.get("/executions/nope"), 404, "unknown_execution")


def test_an_id_with_url_reserved_characters_is_one_path_segment(client: FlaskClient) -> None:
    eid = "team:42 #a?b%c Zoë"
    started = client.post("/executions", json={"flow": "echo", "input": {}, "execution_id": eid})
    assert started.status_code == 200
    response = client.get(f"/executions/{quote(eid, safe='')}")
    assert response.status_code == 200
    assert response.json is not None and response.json["execution"]["execution_id"] == eid


def test_an_id_with_a_slash_is_refused_naming_the_rule(client: FlaskClient) -> None:
    body = {"flow": "echo", "input": {}, "execution_id": "team/42"}
    refused = assert_error(client.post("/executions", json=body), 400, "invalid_execution_id")
    assert "'/'" in refused["message"]
    assert_error(client.get("/executions/team%2F42"), 400, "invalid_execution_id")


def test_execute(client: FlaskClient, runtime: Runtime) -> None:
    seed(runtime, "echo", {"n": 2}, "x-1")
    response = client.post(
        "/execute",
        json={
            "executionPackage": {
                "execution_id": "x-1",
                "flow": "echo",
                "reason": "start",
                "dispatch_id": "x-1:1",
            }
        },
    )
    assert response.status_code == 200
    assert response.json is not None and response.json["output"]["doubled"] == 4
    assert_error(
        client.post("/execute", json={"executionPackage": {"execution_id": "zz"}}),
        404,
        "unknown_execution",
    )
    assert_error(client.post("/execute", json={"execution_id": "x-1"}), 400, "invalid_request")
    assert_error(
        client.post("/execute", json={"executionPackage": {"execution_id": ""}}),
        400,
        "invalid_execution_id",
    )


def test_unknown_route_and_method(client: FlaskClient) -> None:
    assert_error(client.get("/nowhere"), 404, "not_found")
    assert_error(client.get("/executions/a/b/c"), 404, "not_found")
    wrong = client.get("/execute")
    assert_error(wrong, 405, "method_not_allowed")
    assert wrong.headers["Allow"] == "POST"
    assert_error(client.delete("/executions/x"), 405)
    assert client.head("/health").status_code == 200


@pytest.mark.parametrize("path", ["/executions/a%0Ab", "/robots.txt", "/favicon.ico"])
def test_paths_the_framework_routes_itself_answer_json_too(client: FlaskClient, path: str) -> None:
    assert_error(client.get(path), 404, "not_found")
