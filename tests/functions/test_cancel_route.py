"""``POST /executions/{id}/cancel`` and a start's ``timeout``: authorized like a verdict,
recorded with who asked, and the flow's compensation runs before it ends ``cancelled``."""

from __future__ import annotations

import json
from pathlib import Path

from flask.testing import FlaskClient

from loom import events as ev
from loom.runtime import Runtime
from loom.workers.auth import sign
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, SECRET
from tests.functions.helpers import assert_error, history


def _start(client: FlaskClient, body: dict[str, object]) -> dict[str, object]:
    response = client.post("/executions", json=body, headers=BEARER)
    assert response.status_code == 200, response.json
    assert response.json is not None
    return response.json


def test_cancel_needs_auth_runs_the_compensation_and_records_who(
    client: FlaskClient, runtime: Runtime, side_dir: Path
) -> None:
    started = _start(client, {"flow": "refundable", "input": 5, "execution_id": "r-1"})
    assert started["status"] == "suspended"
    before = history(runtime, "r-1")
    assert_error(client.post("/executions/r-1/cancel"), 401, "unauthenticated")
    forged = {"X-Loom-Signature": sign(SECRET, "retry", "r-1", b"")}  # another action's
    assert_error(client.post("/executions/r-1/cancel", headers=forged), 403, "forbidden")
    assert history(runtime, "r-1") == before
    body = json.dumps({"reason": "customer left", "by": "carol"}).encode()
    signed = {
        "X-Loom-Signature": sign(SECRET, "cancel", "r-1", body),
        "Content-Type": "application/json",
    }
    response = client.post("/executions/r-1/cancel", data=body, headers=signed)
    assert response.status_code == 200, response.json
    assert response.json is not None and response.json["status"] == "cancelled"
    assert response.json["error"]["message"] == "customer left"
    assert calls(side_dir) == ["r-1:1 t.charge", "r-1:3 t.greet"]  # the refund, once
    ends = [e for e in history(runtime, "r-1") if isinstance(e, ev.ExecutionCancelled)]
    assert [e.by for e in ends] == ["carol (via shared-secret)"]
    again = client.post("/executions/r-1/cancel", headers=BEARER)
    assert_error(again, 409)


def test_cancel_refuses_bad_bodies_and_unknown_executions(client: FlaskClient) -> None:
    _start(client, {"flow": "refundable", "input": 1, "execution_id": "r-2"})
    bad = client.post("/executions/r-2/cancel", json={"why": "x"}, headers=BEARER)
    assert_error(bad, 400)
    assert_error(client.post("/executions/nope/cancel", headers=BEARER), 404)


def test_a_start_takes_a_timeout_and_refuses_a_bad_one(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start(client, {"flow": "refundable", "input": 1, "execution_id": "r-3", "timeout": 3600})
    started = history(runtime, "r-3")[0]
    assert isinstance(started, ev.ExecutionStarted) and started.deadline is not None
    assert started.deadline - started.at == 3600
    for bad in (0, -5, "soon"):
        body = {"flow": "refundable", "input": 1, "execution_id": "r-4", "timeout": bad}
        assert_error(client.post("/executions", json=body, headers=BEARER), 400)
