"""``POST /executions/{id}/messages`` and ``GET /executions/{id}/events/{key}``.

Most tests use the worker target built the way functions-framework serves it; the last one
runs a real worker process on loopback.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import quote

import httpx
import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.auth import SharedSecretAuth, sign
from tests.functions.conftest import BEARER, SECRET, WorkerFactory

PRINCIPAL = SharedSecretAuth(SECRET).principal


def _start(client: FlaskClient, eid: str, n: int) -> None:
    reply = client.post("/executions", json={"flow": "mailbox", "input": n, "execution_id": eid})
    assert reply.status_code == 200, reply.data


def test_messages_over_http_are_checked_like_resumes_and_recorded_with_by(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start(client, "mb-1", 2)
    body = {"topic": "cmd", "payload": {"n": 1}, "message_id": "m1"}
    assert client.post("/executions/mb-1/messages", json=body).status_code == 401
    first = client.post("/executions/mb-1/messages", json=body, headers=BEARER)
    assert first.status_code == 200, first.data
    again = client.post("/executions/mb-1/messages", json=body, headers=BEARER)
    assert json.loads(again.data)["status"] == "suspended"  # one message, not two
    body = {"topic": "cmd", "payload": {"n": 2}}
    done = json.loads(client.post("/executions/mb-1/messages", json=body, headers=BEARER).data)
    assert (done["status"], done["output"]) == ("completed", [{"n": 1}, {"n": 2}])
    received = [e for e in asyncio.run(runtime.history("mb-1")) if e.type == "MessageReceived"]
    assert [e.by for e in received] == [PRINCIPAL, PRINCIPAL]  # who resumes, who sends


def test_bad_messages_are_clear_errors(client: FlaskClient) -> None:
    _start(client, "mb-2", 0)
    sent = client.post("/executions/nobody/messages", json={"topic": "cmd"}, headers=BEARER)
    assert (sent.status_code, json.loads(sent.data)["code"]) == (404, "unknown_execution")
    sent = client.post("/executions/mb-2/messages", json={"topic": "cmd"}, headers=BEARER)
    assert (sent.status_code, json.loads(sent.data)["code"]) == (409, "finished")
    sent = client.post("/executions/mb-2/messages", json={"topic": ""}, headers=BEARER)
    assert sent.status_code == 400


def test_published_values_are_read_over_http(client: FlaskClient) -> None:
    _start(client, "mb-3", 2)
    missing = client.get("/executions/mb-3/events/count")
    assert (missing.status_code, json.loads(missing.data)["code"]) == (404, "event_not_found")
    client.post("/executions/mb-3/messages", json={"topic": "cmd"}, headers=BEARER)
    got = client.get(f"/executions/mb-3/events/{quote('count')}?timeout=1")
    assert got.status_code == 200, got.data
    assert json.loads(got.data) == {"execution_id": "mb-3", "key": "count", "value": 1}
    assert client.get("/executions/mb-3/events/count?timeout=600").status_code == 400
    assert client.get("/executions/mb-3/events/count?timeout=nan").status_code == 400


@pytest.mark.slow
async def test_a_reader_long_polls_a_real_worker_until_a_message_moves_the_flow(
    workers: WorkerFactory,
) -> None:
    server = workers()
    base = f"http://{server.host}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        start = {"flow": "mailbox", "input": 1, "execution_id": "mb-4"}
        assert (await http.post("/executions", json=start)).status_code == 200
        reader = asyncio.ensure_future(http.get("/executions/mb-4/events/count?timeout=20"))
        await asyncio.sleep(0.5)
        assert not reader.done()
        sent = await http.post(
            "/executions/mb-4/messages", json={"topic": "cmd", "payload": "hi"}, headers=BEARER
        )
        assert json.loads(sent.content)["output"] == ["hi"]
        got = await asyncio.wait_for(reader, 20)
        assert (got.status_code, got.json()["value"]) == (200, 1)


def test_the_run_chain_is_in_the_execution_view(client: FlaskClient) -> None:
    reply = client.post("/executions", json={"flow": "twice", "input": 0, "execution_id": "tw"})
    assert reply.status_code == 200, reply.data
    view = json.loads(client.get("/executions/tw").data)
    assert (view["execution"]["status"], view["execution"]["output"]) == ("completed", 1)
    assert [r["run_id"] for r in view["runs"]] == ["tw#run1", "tw#run2"]
    assert view["runs"][1]["first_seq"] == view["runs"][0]["last_seq"] + 1
    assert view["execution"]["state"]["run"] == 2


def _received(runtime: Runtime, eid: str) -> list[tuple[str, object]]:
    events = asyncio.run(runtime.history(eid))
    return [(e.message_id, e.payload) for e in events if e.type == "MessageReceived"]


def _post(
    client: FlaskClient, eid: str, raw: bytes, **headers: str
) -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": "application/json", **headers}
    reply = client.post(f"/executions/{eid}/messages", data=raw, headers=headers)
    return reply.status_code, json.loads(reply.data)


def test_a_used_message_id_with_another_body_is_a_409_and_nothing_is_written(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start(client, "mb-5", 3)
    first = b'{"topic": "cmd", "payload": 1, "message_id": "m"}'
    assert _post(client, "mb-5", first, **BEARER)[0] == 200
    for other in (
        b'{"topic": "cmd", "payload": 1.0, "message_id": "m"}',  # equal in Python, not JSON
        b'{"topic": "cmd", "payload": true, "message_id": "m"}',
        b'{"topic": "cmd", "payload": 2, "message_id": "m"}',
        b'{"topic": "other", "payload": 1, "message_id": "m"}',
    ):
        status, body = _post(client, "mb-5", other, **BEARER)
        assert (status, body["code"]) == (409, "conflicting_message"), other
        assert set(body) == {"code", "message", "details"}
        assert "'m'" in str(body["message"])
    status, body = _post(client, "mb-5", first, **BEARER)  # the same body: a no-op
    assert (status, body["status"]) == (200, "suspended")
    assert _received(runtime, "mb-5") == [("m", 1)]


def test_a_replayed_signed_message_without_an_id_is_delivered_once(
    client: FlaskClient, runtime: Runtime
) -> None:
    """The signature is good for minutes; a copy of the request must not be a second
    message (the default id is derived from the signature, not a fresh one)."""
    _start(client, "mb-6", 3)
    raw = json.dumps({"topic": "cmd", "payload": {"amount": 5}}).encode()
    signature = sign(SECRET, "resume", "mb-6", raw)
    for _ in range(3):
        status, body = _post(client, "mb-6", raw, **{"X-Loom-Signature": signature})
        assert (status, body["status"]) == (200, "suspended")
    assert [p for _, p in _received(runtime, "mb-6")] == [{"amount": 5}]
    # Another signed request (another signature) is another message; so is every unsigned one.
    again = sign(SECRET, "resume", "mb-6", raw, expires=int(time.time()) + 120)
    assert _post(client, "mb-6", raw, **{"X-Loom-Signature": again})[0] == 200
    status, body = _post(client, "mb-6", raw, **BEARER)
    assert (status, body["status"]) == (200, "completed")
    ids = [mid for mid, _ in _received(runtime, "mb-6")]
    assert len(set(ids)) == 3 and ids[0].startswith("sig:") and ids[2].startswith("msg:")


def test_a_signed_message_names_its_own_id_when_it_gives_one(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start(client, "mb-7", 2)
    raw = json.dumps({"topic": "cmd", "payload": 1, "message_id": "mine"}).encode()
    headers = {"X-Loom-Signature": sign(SECRET, "resume", "mb-7", raw)}
    assert _post(client, "mb-7", raw, **headers)[0] == 200
    assert _received(runtime, "mb-7") == [("mine", 1)]
