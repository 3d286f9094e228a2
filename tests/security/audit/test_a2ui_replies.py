"""A2UI function replies (grain A) through the worker's generic resume route.

Whoever holds the resume credential can post to ``/executions/{id}/resume``; for the gate
``A2UIFunctionResult`` the plugin's resume check must make that route as strict as its own
delivery function. The worker is the ``worker`` target as functions-framework builds it,
serving :mod:`tests.security.audit.a2ui_app` over a per-test SQLite file; the test plays
the renderer.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from typing import Any

import functions_framework
import pytest
from flask.testing import FlaskClient

from loom.plugins.a2ui import A2UI_FUNCTION_RESULT
from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests.functions.conftest import BEARER, MAIN
from tests.functions.helpers import history
from tests.security.audit.helpers import JSON, refused

A2UI = "tests.security.audit.a2ui_app:app"


@pytest.fixture
def worker(worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> FlaskClient:
    monkeypatch.setenv("LOOM_APP", A2UI)
    return functions_framework.create_app("worker", str(MAIN)).test_client()


@pytest.fixture
def rt(worker: FlaskClient, worker_env: dict[str, str]) -> Iterator[Runtime]:
    runtime = build_runtime(A2UI, worker_env["LOOM_STORE"])
    yield runtime
    asyncio.run(runtime.store.aclose())


def call_id(worker: FlaskClient, eid: str) -> str:
    """Start a locale request; the id of the call the execution waits for."""
    answer = worker.post(
        "/executions", json={"flow": "locale", "input": f"surface-{eid}", "execution_id": eid}
    )
    assert answer.status_code == 200 and answer.json is not None, answer.data
    (gate,) = answer.json["waiting_on"]
    assert gate["on"] == A2UI_FUNCTION_RESULT
    return gate["correlation_key"]


def reply(worker: FlaskClient, eid: str, key: str, payload: Any) -> Any:
    body = json.dumps({"on": A2UI_FUNCTION_RESULT, "correlation_key": key, "payload": payload})
    return worker.post(f"/executions/{eid}/resume", data=body, headers={**JSON, **BEARER})


def test_replies_that_answer_no_call_of_this_execution_are_refused(
    worker: FlaskClient, rt: Runtime
) -> None:
    """Attack: a reply for a call id never issued, for another execution's call (under
    its key, and under this execution's key), and of the wrong types. Promise: 400 naming
    the problem (``a2ui_correlation``, ``a2ui_protocol``, ``a2ui_invalid``), neither log
    changes; the right reply then completes the execution."""
    mine, theirs = call_id(worker, "mine"), call_id(worker, "theirs")
    logs = {eid: history(rt, eid) for eid in ("mine", "theirs")}
    good = {"functionCallId": mine, "value": {"locale": "fr-FR"}}
    attacks: list[tuple[str, Any, str]] = [
        (f"{mine}#never", {**good, "functionCallId": f"{mine}#never"}, "a2ui_correlation"),
        (theirs, {**good, "functionCallId": theirs}, "a2ui_correlation"),
        (mine, {**good, "functionCallId": theirs}, "a2ui_correlation"),
        (mine, {"functionCallId": 7, "value": {"locale": "fr"}}, "a2ui_protocol"),
        (mine, {"functionCallId": mine}, "a2ui_protocol"),
        (mine, {**good, "error": {"code": "x", "message": "y"}}, "a2ui_protocol"),
        (mine, {**good, "extra": 1}, "a2ui_protocol"),
        (mine, [good], "a2ui_protocol"),
        (mine, {**good, "value": {"locale": 5}}, "a2ui_invalid"),
        (mine, {**good, "value": {"locale": "fr", "script": "<svg onload=x>"}}, "a2ui_invalid"),
        (mine, {**good, "value": {"locale": "f" * 10_000}}, "a2ui_invalid"),
    ]
    for key, payload, code in attacks:
        refused(reply(worker, "mine", key, payload), 400, code)
    huge = reply(worker, "mine", mine, {**good, "value": {"locale": "fr", "n": 10**30}})
    refused(huge, 400)
    nan = json.dumps({"on": A2UI_FUNCTION_RESULT, "correlation_key": mine, "payload": math.nan})
    headers = {**JSON, **BEARER}
    refused(worker.post("/executions/mine/resume", data=nan, headers=headers), 400)
    assert {eid: history(rt, eid) for eid in logs} == logs
    done = reply(worker, "mine", mine, good)
    assert done.status_code == 200 and done.json is not None, done.data
    assert (done.json["status"], done.json["output"]) == ("completed", {"locale": "fr-FR"})
    assert history(rt, "theirs") == logs["theirs"]


def test_a_second_reply_to_an_answered_call_changes_nothing(
    worker: FlaskClient, rt: Runtime
) -> None:
    """Attack: the renderer (or someone replaying its request) answers an answered call
    again, with another value. Promise: the first answer stands; the repeat appends
    nothing (a redelivery of the same call id is a no-op, the flow's result is unchanged)."""
    key = call_id(worker, "e-1")
    first = reply(worker, "e-1", key, {"functionCallId": key, "value": {"locale": "fr-FR"}})
    assert first.status_code == 200, first.data
    after = history(rt, "e-1")
    again = reply(worker, "e-1", key, {"functionCallId": key, "value": {"locale": "de-DE"}})
    assert again.status_code == 200 and again.json is not None, again.data
    assert again.json["output"] == {"locale": "fr-FR"}
    assert history(rt, "e-1") == after
    view = worker.get("/executions/e-1").json
    assert view is not None and view["execution"]["output"] == {"locale": "fr-FR"}
