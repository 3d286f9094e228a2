"""``POST /bulk/cancel``, ``/bulk/resume`` and ``/bulk/retry`` through the worker target.

Authorized like the operation on one execution (the operator's authenticator, no execution
id), then the caller check on every execution selected before any is acted on: one refusal
refuses the request, names that execution and nothing else, and nothing is done. The
answers fit the OpenAPI document. The worker is the ``worker`` target as functions-framework
builds it, over a per-test SQLite file.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import functions_framework
import pytest
from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator

from loom import events as ev
from loom.runtime import Runtime
from loom.workers.auth import sign
from loom.workers.openapi_bulk import REPORT
from tests.functions.conftest import BEARER, MAIN, SECRET
from tests.functions.helpers import assert_error, history
from tests.security.audit.helpers import refused
from tests.security.scoped_callers import SEEN

JSON = {"Content-Type": "application/json"}


def _start_gated(runtime: Runtime, *ids: str) -> None:
    for eid in ids:
        result = asyncio.run(runtime.start("gated", {"n": 1}, execution_id=eid))
        assert result.status == "suspended"


def _post(client: FlaskClient, path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    response = client.post(path, data=json.dumps(body).encode(), headers=headers)
    if response.status_code == 200:
        Draft202012Validator(REPORT).validate(response.json)
    return response


def test_a_bulk_cancel_is_authorized_previewed_and_done(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start_gated(runtime, "g-1", "g-2")
    asyncio.run(runtime.start("echo", {"n": 1}, execution_id="e-1"))  # completed
    body = {"flow": "gated", "dry_run": True}
    assert_error(_post(client, "/bulk/cancel", body, JSON), 401)
    raw = json.dumps(body).encode()
    wrong = {**JSON, "X-Loom-Signature": sign(SECRET, "resume", "", raw)}
    assert_error(client.post("/bulk/cancel", data=raw, headers=wrong), 403)
    signed = {**JSON, "X-Loom-Signature": sign(SECRET, "cancel", "", raw)}
    planned = client.post("/bulk/cancel", data=raw, headers=signed)
    assert planned.status_code == 200 and planned.json is not None, planned.data
    assert (planned.json["count"], planned.json["dry_run"]) == (2, True)
    assert {i["outcome"] for i in planned.json["items"]} == {None}
    assert asyncio.run(runtime.result("g-1")).status == "suspended"  # nothing written
    real = {"flow": "gated", "reason": "closing", "by": "dana"}
    done = _post(client, "/bulk/cancel", real, {**JSON, **BEARER})
    assert done.status_code == 200 and done.json is not None
    assert [(i["execution_id"], i["outcome"]) for i in done.json["items"]] == [
        ("g-2", "cancelled"),
        ("g-1", "cancelled"),
    ]
    (asked,) = [e for e in history(runtime, "g-1") if isinstance(e, ev.ExecutionCancelled)]
    assert (asked.by, asked.reason) == ("dana (via shared-secret)", "closing")


def test_a_bulk_resume_answers_each_waiting_gate(client: FlaskClient, runtime: Runtime) -> None:
    _start_gated(runtime, "r-1", "r-2")
    body = {"on": "go", "payload": {"name": "ann"}, "status": "suspended"}
    done = _post(client, "/bulk/resume", body, {**JSON, **BEARER})
    assert done.status_code == 200 and done.json is not None, done.data
    assert [(i["detail"], i["outcome"]) for i in done.json["items"]] == [
        ("go/r-2:go", "completed"),
        ("go/r-1:go", "completed"),
    ]
    assert asyncio.run(runtime.result("r-1")).output["greeting"] == "hello ann"
    own = _post(client, "/bulk/resume", {"on": "loom.timer"}, {**JSON, **BEARER})
    assert_error(own, 400, "reserved_gate")


def test_a_bulk_retry_redrives_failed_ones(client: FlaskClient, runtime: Runtime) -> None:
    failed = asyncio.run(runtime.start("echo", {"n": "x"}, execution_id="d-1"))  # int("x")
    assert failed.status == "failed"
    done = _post(client, "/bulk/retry", {"status": "failed"}, {**JSON, **BEARER})
    assert done.status_code == 200 and done.json is not None, done.data
    assert [(i["execution_id"], i["action"], i["outcome"]) for i in done.json["items"]] == [
        ("d-1", "fork", "failed")  # the same input fails the same way
    ]
    assert done.json["items"][0]["detail"].startswith("d-1.redrive-")
    again = _post(client, "/bulk/retry", {"status": "failed"}, {**JSON, **BEARER})
    assert again.json is not None and [i["action"] for i in again.json["items"]] == ["none"]


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/bulk/cancel", {"status": "completed"}, "invalid_input"),
        ("/bulk/cancel", {"limit": 0}, "invalid_request"),
        ("/bulk/cancel", {"created_from": "soon"}, "invalid_input"),
        ("/bulk/cancel", {"surprise": 1}, "invalid_request"),
        ("/bulk/resume", {}, "invalid_request"),
        ("/bulk/retry", {"execution_ids": ["a/b"]}, "invalid_execution_id"),
    ],
)
def test_bad_bodies_are_refused_with_nothing_done(
    client: FlaskClient, runtime: Runtime, path: str, body: dict[str, Any], code: str
) -> None:
    _start_gated(runtime, "b-1")
    assert_error(_post(client, path, body, {**JSON, **BEARER}), 400, code)
    assert asyncio.run(runtime.result("b-1")).status == "suspended"


@pytest.fixture
def scoped(worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> FlaskClient:
    """The worker with a caller check allowing each caller its own executions only."""
    monkeypatch.setenv("LOOM_CALLER_AUTH", "tests.security.scoped_callers:per_execution")
    SEEN.clear()
    return cast(Flask, functions_framework.create_app("worker", str(MAIN))).test_client()


def test_each_selected_execution_is_checked_and_one_refusal_refuses_all(
    scoped: FlaskClient, runtime: Runtime
) -> None:
    _start_gated(runtime, "alice-1", "alice-2", "bob-1")
    as_alice = {**JSON, **BEARER, "X-Caller": "alice"}
    denied = refused(_post(scoped, "/bulk/cancel", {"flow": "gated"}, as_alice), 403)
    assert "'bob-1'" in denied["message"] and "one of the 3 selected" in denied["message"]
    assert "gated" not in json.dumps(denied) and "alice-" not in json.dumps(denied)
    assert {asyncio.run(runtime.result(e)).status for e in ("alice-1", "alice-2", "bob-1")} == {
        "suspended"
    }
    asked = {(r.action, r.execution_id, r.flow) for r in SEEN if r.execution_id}
    assert ("cancel", "bob-1", "gated") in asked
    # Named, her own: checked before anything is read, and done.
    mine = {"execution_ids": ["alice-1", "alice-2"]}
    done = _post(scoped, "/bulk/cancel", mine, as_alice)
    assert done.status_code == 200 and done.json is not None, done.data
    assert done.json["count"] == 2
    assert asyncio.run(runtime.result("bob-1")).status == "suspended"
    # Naming another's is refused as a one-execution cancel would be, before any read.
    SEEN.clear()
    theirs = {"execution_ids": ["bob-1", "nobody-1"]}
    refused(_post(scoped, "/bulk/cancel", theirs, as_alice), 403)
    assert [r.execution_id for r in SEEN] == ["bob-1"]  # refused at the first named
