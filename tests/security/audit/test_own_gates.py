"""A resume from outside naming one of Loom's own gates.

A timer (``ctx.sleep``), an asyncio deadline in a flow and a mailbox slot are gates Loom
fills itself, when the timer falls due or a message is sent. The public resume route took
any ``on``: whoever may resume (a webhook, a renderer holding the resume secret) could wake
a day's sleep at once, expire an approval's deadline before the approver answered, or slip
a message into a mailbox past its ``message_id``. Promise: 400 ``reserved_gate`` naming
the gate on every route to ``Runtime.resume`` (HTTP, console form), nothing appended; the
gates still fire the way they should.

The worker is the ``worker`` target as functions-framework builds it, serving
:mod:`tests.security.audit.gates_app` over a per-test SQLite file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import functions_framework
import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests.functions.conftest import BEARER, MAIN
from tests.functions.helpers import history
from tests.security.audit.helpers import JSON, refused

GATES = "tests.security.audit.gates_app:app"


@pytest.fixture
def gates(worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> FlaskClient:
    monkeypatch.setenv("LOOM_APP", GATES)
    return functions_framework.create_app("worker", str(MAIN)).test_client()


@pytest.fixture
def gates_runtime(gates: FlaskClient, worker_env: dict[str, str]) -> Iterator[Runtime]:
    rt = build_runtime(GATES, worker_env["LOOM_STORE"])
    yield rt
    asyncio.run(rt.store.aclose())


def start(client: FlaskClient, flow: str, value: Any, eid: str) -> dict[str, Any]:
    answer = client.post("/executions", json={"flow": flow, "input": value, "execution_id": eid})
    assert answer.status_code == 200 and answer.json is not None, answer.data
    assert answer.json["status"] == "suspended", answer.json
    return answer.json


def resume(client: FlaskClient, eid: str, on: str, key: str, payload: Any = None) -> Any:
    body = json.dumps({"on": on, "correlation_key": key, "payload": payload})
    return client.post(f"/executions/{eid}/resume", data=body, headers={**JSON, **BEARER})


def test_a_resume_cannot_wake_a_sleep_or_expire_a_deadline(
    gates: FlaskClient, gates_runtime: Runtime
) -> None:
    """Attack: resume the ``loom.timer`` gate of a day's sleep, and the
    ``loom.loop_timer`` gate of a day's deadline, right after they opened (and a key of a
    timer not opened yet). Promise: 400 ``reserved_gate``, logs unchanged, both still
    waiting; the approval itself is still answered normally."""
    for flow, eid in (("nap", "n-1"), ("deadline", "d-1")):
        gates_open = start(gates, flow, None, eid)["waiting_on"]
        before = history(gates_runtime, eid)
        own = [g for g in gates_open if g["on"].startswith("loom.")]
        assert own, gates_open
        for gate in own:
            answer = resume(gates, eid, gate["on"], gate["correlation_key"], {"timed_out": True})
            body = refused(answer, 400, "reserved_gate")
            assert body["details"]["on"] == gate["on"]
        refused(resume(gates, eid, own[0]["on"], f"{eid}:99"), 400, "reserved_gate")
        assert history(gates_runtime, eid) == before
        view = gates.get(f"/executions/{eid}")
        assert view.json is not None and view.json["execution"]["status"] == "suspended"
    approved = resume(gates, "d-1", "approval", "d-1", "ok")
    assert approved.status_code == 200 and approved.json is not None
    assert (approved.json["status"], approved.json["output"]) == ("completed", "ok")


def test_a_resume_cannot_fill_a_mailbox_slot(gates: FlaskClient, gates_runtime: Runtime) -> None:
    """Attack: resume ``loom.recv`` / ``cmd#1`` with a forged message, before a real one
    comes. Promise: 400 ``reserved_gate``; the real messages fill the slots in order."""
    start(gates, "inbox", 2, "m-1")
    before = history(gates_runtime, "m-1")
    refused(resume(gates, "m-1", "loom.recv", "cmd#1", "FORGED"), 400, "reserved_gate")
    assert history(gates_runtime, "m-1") == before
    for payload in ("real-1", "real-2"):
        sent = gates.post(
            "/executions/m-1/messages", json={"topic": "cmd", "payload": payload}, headers=BEARER
        )
        assert sent.status_code == 200, sent.data
    done = gates.get("/executions/m-1").json
    assert done is not None and done["execution"]["output"] == ["real-1", "real-2"]


def test_the_console_resume_form_is_refused_the_same(
    gates: FlaskClient, gates_runtime: Runtime
) -> None:
    """Attack: the console's resume form (signed in, CSRF token right) naming the timer.
    Promise: a 400 page saying ``reserved_gate``, nothing appended."""
    gate = start(gates, "nap", None, "n-2")["waiting_on"][0]
    before = history(gates_runtime, "n-2")
    gates.get("/console/executions")
    token = gates.get_cookie("loom_console_csrf", path="/console")
    assert token is not None
    form = "application/x-www-form-urlencoded"
    signed_in = gates.post(
        "/console/sign-in", data={"csrf": token.value, "token": BEARER["Authorization"][7:]}
    )
    assert signed_in.status_code == 303
    fields = {"csrf": token.value, "on": gate["on"], "correlation_key": gate["correlation_key"]}
    answer = gates.post("/console/executions/n-2/resume", data=fields, content_type=form)
    assert answer.status_code == 400 and "reserved_gate" in answer.get_data(as_text=True)
    assert history(gates_runtime, "n-2") == before
