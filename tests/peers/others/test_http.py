"""The peers' HTTP surfaces ported onto Loom's worker (Restate's ingress with an
``idempotency-key``, DBOS's and Inngest's management endpoints), through
``functions_framework.create_app`` exactly as the ``worker`` target is deployed, over SQLite
on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from flask.testing import FlaskClient

from tests.peers.others import apps

ROOT = Path(__file__).resolve().parents[3]
MAIN = ROOT / "functions" / "main.py"
SECRET = "peer-secret-0123456789"
BEARER = {"Authorization": f"Bearer {SECRET}"}


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FlaskClient:
    """The ``worker`` target on a fresh SQLite file, with a resume secret."""
    monkeypatch.setenv("LOOM_APP", "tests.peers.others.apps:app")
    monkeypatch.setenv("LOOM_STORE", f"sqlite:///{tmp_path / 'loom.db'}")
    monkeypatch.setenv("LOOM_RESUME_SECRET", SECRET)
    for key in ("LOOM_RESUME_AUTH", "LOOM_VERDICT_AUTH", "LOOM_VERDICT_SECRET", "LOOM_CRASH_AT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("LOOM_TEST_SIDE_FILE", raising=False)
    apps.LEDGER.clear()
    return functions_framework.create_app("worker", str(MAIN)).test_client()


def _json(reply: Any) -> Any:
    return json.loads(reply.data)


def _start(client: FlaskClient, flow: str, value: Any, eid: str, **extra: Any) -> Any:
    body = {"flow": flow, "input": value, "execution_id": eid, **extra}
    return client.post("/executions", json=body)


def test_an_idempotency_key_makes_the_second_call_return_the_first_response(
    client: FlaskClient,
):
    """Restate ingress with ``idempotency-key``: the same key returns the same response and
    the handler runs once; another request body under that key is a 409 conflict."""
    first = _start(client, "pay", 9, "h-1")
    second = _start(client, "pay", 9, "h-1")
    assert first.status_code == second.status_code == 200
    assert _json(first)["output"] == _json(second)["output"] == "ch-h-1:1-9"
    assert [line for line in apps.LEDGER if line.startswith("charge:")] == ["charge:h-1:1"]
    conflict = _start(client, "pay", 10, "h-1")
    assert (conflict.status_code, _json(conflict)["code"]) == (409, "conflict")


def test_an_awakeable_is_resolved_over_http_and_needs_the_secret(client: FlaskClient):
    """Restate ``POST /restate/awakeables/{id}/resolve``: Loom's authenticated resume."""
    assert _json(_start(client, "awakeable", None, "h-2"))["status"] == "suspended"
    body = {"on": "callback", "correlation_key": "h-2:cb", "payload": {"ok": 1}}
    assert client.post("/executions/h-2/resume", json=body).status_code == 401
    done = client.post("/executions/h-2/resume", json=body, headers=BEARER)
    assert (done.status_code, _json(done)["output"]) == (200, {"value": {"ok": 1}})


def test_send_with_a_message_id_and_read_published_state(client: FlaskClient):
    """DBOS ``send`` with an idempotency key and ``get_event`` over HTTP."""
    _start(client, "publisher", 1, "h-3")
    got = client.get("/executions/h-3/events/stage")
    assert (got.status_code, _json(got)["value"]) == (200, "waiting")
    body = {"topic": "go", "payload": None, "message_id": "m-1"}
    done = client.post("/executions/h-3/messages", json=body, headers=BEARER)
    assert _json(done)["status"] == "completed"
    again = client.post("/executions/h-3/messages", json=body, headers=BEARER)
    assert again.status_code == 200  # a repeated message id is a no-op, even after the end
    missing = client.get("/executions/h-3/events/nothing?timeout=0.1")
    assert (missing.status_code, _json(missing)["code"]) == (404, "event_not_found")


def test_cancel_over_http_compensates_and_a_second_cancel_is_409(client: FlaskClient):
    """Restate ``DELETE /invocations/{id}`` (cancel), DBOS ``POST /workflows/{id}/cancel``."""
    _start(client, "saga", ["room"], "h-4")
    body = {"reason": "user", "by": "ops"}
    assert client.post("/executions/h-4/cancel", json=body).status_code == 401
    done = client.post("/executions/h-4/cancel", json=body, headers=BEARER)
    assert (done.status_code, _json(done)["status"]) == (200, "cancelled")
    assert [line.split(":")[0] for line in apps.LEDGER] == ["echo", "echo"]
    again = client.post("/executions/h-4/cancel", json=body, headers=BEARER)
    assert again.status_code == 409


def test_a_start_timeout_over_http_is_recorded_as_the_deadline(client: FlaskClient):
    """DBOS ``SetWorkflowTimeout`` at enqueue time: ``timeout`` in ``POST /executions``."""
    reply = _start(client, "deadline", None, "h-5", timeout=5)
    assert _json(reply)["status"] == "suspended"
    shown = _json(client.get("/executions/h-5"))
    started = shown["history"][0]
    assert started["deadline"] == pytest.approx(started["at"] + 5)


def test_fork_over_http_and_an_unknown_step_is_409(client: FlaskClient):
    """DBOS ``fork_workflow`` over its admin API."""
    _start(client, "steps", 2, "h-6")
    body = {"from_step": "2", "execution_id": "h-6-f"}
    forked = client.post("/executions/h-6/fork", json=body, headers=BEARER)
    assert (forked.status_code, _json(forked)["output"]) == (200, [0, 1])
    bad = client.post(
        "/executions/h-6/fork", json={"from_step": "9", "execution_id": "h-6-g"}, headers=BEARER
    )
    assert (bad.status_code, _json(bad)["code"]) == (409, "not_forkable")


def test_dead_letters_are_listed_and_redriven_once(client: FlaskClient):
    """DBOS's dead-letter handling over HTTP: list failed workflows and re-drive them; the
    same letter re-driven twice is one fork (the fork's id derives from the failure)."""
    _start(client, "raises", "oops", "h-7")
    listed = _json(client.get("/dead-letters?status=failed"))["dead_letters"]
    assert [row["execution_id"] for row in listed] == ["h-7"]
    body = {"status": "failed", "flow": "raises", "by": "ops"}
    (first,) = _json(client.post("/dead-letters/retry", json=body, headers=BEARER))["redriven"]
    assert first["execution_id"] == "h-7" and first["new_execution_id"].startswith("h-7.")
    second = _json(client.post("/dead-letters/retry", json=body, headers=BEARER))["redriven"]
    again = next(row for row in second if row["execution_id"] == "h-7")
    assert again["new_execution_id"] == first["new_execution_id"]
    assert [line for line in apps.LEDGER if line.startswith("echo:h-7:")] == ["echo:h-7:1"]


def test_a_start_on_a_queue_with_a_partition_key(client: FlaskClient):
    """Inngest ``concurrency.key`` / Restate virtual-object key at the ingress."""
    reply = _start(client, "queued", 0.0, "h-8", queue="keyed", partition_key="cust-9")
    assert (reply.status_code, _json(reply)["status"]) == (200, "completed")
    history = _json(client.get("/executions/h-8"))["history"]
    assert (history[0]["queue"], history[0]["partition_key"]) == ("keyed", "cust-9")
    unknown = _start(client, "queued", 0.0, "h-9", queue="nope")
    assert unknown.status_code == 400 and "nope" in _json(unknown)["message"]


def test_a_zero_sleep_over_http_answers_where_the_execution_got_to(client: FlaskClient):
    """Restate ``ctx.sleep(0)`` over the ingress: the answer is the completed result, not
    the suspension the execution already left."""
    reply = _start(client, "sleeper", 0, "h-10")
    assert _json(reply)["status"] == "completed"
