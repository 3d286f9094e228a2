"""``POST /executions/{id}/updates``, ``GET …/updates/{update_id}``, ``POST …/query`` and
``GET …/streams/{key}`` on the worker target as functions-framework serves it, and on a real
worker process on loopback; answers checked against the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.auth import SharedSecretAuth, sign
from tests.functions.conftest import BEARER, SECRET, WorkerFactory
from tests.functions.test_openapi import _check  # pyright: ignore[reportPrivateUsage]

PRINCIPAL = SharedSecretAuth(SECRET).principal
UPDATES = "/executions/{execution_id}/updates"
UPDATE = "/executions/{execution_id}/updates/{update_id}"
QUERY = "/executions/{execution_id}/query"
STREAM = "/executions/{execution_id}/streams/{key}"


def _start(client: FlaskClient, eid: str) -> None:
    reply = client.post("/executions", json={"flow": "cart", "execution_id": eid})
    assert reply.status_code == 200, reply.data


def _body(reply: Any) -> dict[str, Any]:
    return json.loads(reply.data)


def test_an_update_is_checked_like_a_resume_answered_and_recorded_with_by(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start(client, "u-1")
    body = {"name": "add", "args": "apple", "update_id": "a-1"}
    assert client.post("/executions/u-1/updates", json=body).status_code == 401
    sent = client.post("/executions/u-1/updates", json=body, headers=BEARER)
    _check(UPDATES, "post", sent)
    assert sent.status_code == 200, sent.data
    assert _body(sent) == {
        "execution_id": "u-1",
        "update_id": "a-1",
        "name": "add",
        "status": "completed",
        "output": 1,
        "error": None,
    }
    again = client.post("/executions/u-1/updates", json=body, headers=BEARER)
    assert _body(again)["output"] == 1  # the same update, the same answer
    other = client.post("/executions/u-1/updates", json={**body, "args": "pear"}, headers=BEARER)
    _check(UPDATES, "post", other)
    assert (other.status_code, _body(other)["code"]) == (409, "conflicting_update")
    read = client.get("/executions/u-1/updates/a-1")
    _check(UPDATE, "get", read)
    assert _body(read)["output"] == 1
    history = asyncio.run(runtime.history("u-1"))
    [accepted] = [e for e in history if e.type == "UpdateAccepted"]
    assert accepted.by == PRINCIPAL  # who sends it is who the check accepted


def test_refusals_are_clear_and_write_nothing(client: FlaskClient, runtime: Runtime) -> None:
    _start(client, "u-2")
    before = len(asyncio.run(runtime.history("u-2")))
    refused = client.post(
        "/executions/u-2/updates", json={"name": "add", "args": " "}, headers=BEARER
    )
    _check(UPDATES, "post", refused)
    assert (refused.status_code, _body(refused)["code"]) == (422, "update_rejected")
    assert "an item has a name" in _body(refused)["message"]
    unknown = client.post("/executions/u-2/updates", json={"name": "drop"}, headers=BEARER)
    assert (unknown.status_code, _body(unknown)["code"]) == (422, "unknown_update_handler")
    bad = client.post("/executions/u-2/updates", json={"args": 1}, headers=BEARER)
    assert bad.status_code == 400
    waits = client.post(
        "/executions/u-2/updates", json={"name": "add", "args": "x", "wait": 61}, headers=BEARER
    )
    assert waits.status_code == 400
    assert len(asyncio.run(runtime.history("u-2"))) == before
    nobody = client.post("/executions/nobody/updates", json={"name": "add"}, headers=BEARER)
    assert (nobody.status_code, _body(nobody)["code"]) == (404, "unknown_execution")
    missing = client.get("/executions/u-2/updates/none")
    _check(UPDATE, "get", missing)
    assert (missing.status_code, _body(missing)["code"]) == (404, "unknown_update")
    assert client.get("/executions/u-2/updates/none?wait=x").status_code == 400


def test_a_signed_update_without_an_id_is_the_same_update_when_copied(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start(client, "u-3")
    raw = json.dumps({"name": "add", "args": "fig"}).encode()
    headers = {
        "X-Loom-Signature": sign(SECRET, "resume", "u-3", raw),
        "Content-Type": "application/json",
    }
    first = client.post("/executions/u-3/updates", data=raw, headers=headers)
    copy = client.post("/executions/u-3/updates", data=raw, headers=headers)
    assert first.status_code == copy.status_code == 200, (first.data, copy.data)
    assert _body(first)["update_id"] == _body(copy)["update_id"]
    assert _body(copy)["output"] == 1
    accepted = [e for e in asyncio.run(runtime.history("u-3")) if e.type == "UpdateAccepted"]
    assert len(accepted) == 1


def test_queries_and_streams_are_reads(client: FlaskClient, runtime: Runtime) -> None:
    _start(client, "u-4")
    for item in ("a", "b", "c"):
        client.post("/executions/u-4/updates", json={"name": "add", "args": item}, headers=BEARER)
    before = len(asyncio.run(runtime.history("u-4")))
    asked = client.post("/executions/u-4/query", json={"name": "items"})
    _check(QUERY, "post", asked)
    assert _body(asked) == {"execution_id": "u-4", "name": "items", "value": ["a", "b", "c"]}
    unknown = client.post("/executions/u-4/query", json={"name": "total"})
    _check(QUERY, "post", unknown)
    assert (unknown.status_code, _body(unknown)["code"]) == (404, "unknown_query")
    assert len(asyncio.run(runtime.history("u-4"))) == before  # nothing written
    chunk = client.get("/executions/u-4/streams/added?offset=1&limit=5")
    _check(STREAM, "get", chunk)
    assert _body(chunk) == {
        "execution_id": "u-4",
        "key": "added",
        "offset": 1,
        "values": ["b", "c"],
        "next_offset": 3,
        "closed": False,
    }
    for query in ("offset=-1", "limit=0", "limit=1001", "timeout=61", "offset=x"):
        bad = client.get(f"/executions/u-4/streams/added?{query}")
        _check(STREAM, "get", bad)
        assert bad.status_code == 400, query
    done = client.post("/executions/u-4/updates", json={"name": "checkout"}, headers=BEARER)
    assert _body(done)["output"] == 3
    over = client.get("/executions/u-4/streams/added?offset=3")
    assert (_body(over)["values"], _body(over)["closed"]) == ([], True)


@pytest.mark.slow
async def test_a_real_worker_answers_updates_and_streams_to_a_long_polling_reader(
    workers: WorkerFactory,
) -> None:
    server = workers()
    async with httpx.AsyncClient(base_url=f"http://{server.host}", timeout=30) as http:
        started = await http.post("/executions", json={"flow": "cart", "execution_id": "u-5"})
        assert started.status_code == 200, started.text
        reader = asyncio.ensure_future(http.get("/executions/u-5/streams/added?timeout=20"))
        await asyncio.sleep(0.5)
        assert not reader.done()
        sent = await http.post(
            "/executions/u-5/updates", json={"name": "add", "args": "kiwi"}, headers=BEARER
        )
        assert (sent.status_code, sent.json()["output"]) == (200, 1), sent.text
        got = (await asyncio.wait_for(reader, 20)).json()
        assert (got["values"], got["next_offset"]) == (["kiwi"], 1)
        asked = await http.post("/executions/u-5/query", json={"name": "items"})
        assert asked.json()["value"] == ["kiwi"]
