"""Grain A over real sockets: SSE down, signed POST up, on the example's server and client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from examples.a2ui_callfunction.client import DemoClient
from examples.a2ui_callfunction.server import DemoServer

from loom.plugins.a2ui import sign_body
from loom.wire import ExecutionResult

SECRET = b"test-secret"


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[DemoServer, DemoClient]]:
    server = DemoServer(tmp_path / "loom.db", SECRET)
    http, ws = await server.start("127.0.0.1")
    client = DemoClient(
        f"http://127.0.0.1:{http}", f"ws://127.0.0.1:{ws}", SECRET, tmp_path / "ledger.json"
    )
    try:
        yield server, client
    finally:
        await client.aclose()
        await server.aclose()


async def settle(
    server: DemoServer, eid: str, status: str, client: DemoClient, replies: int
) -> ExecutionResult:
    """Wait for the execution's status and for the client to have seen its replies' answers."""
    async with asyncio.timeout(5):
        while True:
            result = await server.runtime.result(eid)
            if result.status == status and len(client.reply_statuses) >= replies:
                return result
            await asyncio.sleep(0.02)


def body(call_id: str, **outcome: object) -> bytes:
    reply = {"functionCallId": call_id, **outcome}
    return json.dumps({"version": "v1.0", "rendererFunctionResponse": reply}).encode()


async def test_the_client_answers_over_sse_and_post_and_the_gate_resumes(
    pair: tuple[DemoServer, DemoClient],
) -> None:
    server, client = pair
    await client.follow_events("p1")
    await server.runtime.start("profile.greet", {"surface_id": "p1"}, execution_id="g1")
    result = await settle(server, "g1", "completed", client, 1)
    assert result.output == {"locale": "fr-FR", "greeting": "Bonjour"}
    assert [c.functionCallId for c in client.received] == ["g1:getLocale#1"]
    assert client.reply_statuses == [("g1:getLocale#1", 200)]

    good = body("g1:getLocale#1", value={"locale": "de-DE"})
    assert await client.post_reply("p1", good) == 409  # late duplicate
    assert await client.post_reply("p1", good, sign=False) == 401
    assert await client.post_reply("p1", body("g1:getLocale#5", value={})) == 409
    assert await client.post_reply("p2", good) == 409  # posted for another surface
    assert (await server.runtime.result("g1")).output == result.output


async def test_an_invalid_result_is_refused_and_the_gate_keeps_waiting(
    pair: tuple[DemoServer, DemoClient],
) -> None:
    server, client = pair
    client.locale = "français"  # not a locale the catalog admits
    await client.follow_events("p1")
    await server.runtime.start("profile.greet", {"surface_id": "p1"}, execution_id="g2")
    await settle(server, "g2", "suspended", client, 1)
    assert client.reply_statuses == [("g2:getLocale#1", 422)]
    assert (await server.runtime.result("g2")).status == "suspended"
    fixed = body("g2:getLocale#1", value={"locale": "de-DE"})
    assert await client.post_reply("p1", fixed) == 200
    result = await settle(server, "g2", "completed", client, 2)
    assert result.output == {"locale": "de-DE", "greeting": "Guten Tag"}


async def test_tampering_with_a_signed_body_is_refused(
    pair: tuple[DemoServer, DemoClient],
) -> None:
    server, client = pair
    await server.runtime.start("profile.greet", {"surface_id": "p9"}, execution_id="g3")
    signed = body("g3:getLocale#1", value={"locale": "fr-FR"})
    tampered = signed.replace(b"fr-FR", b"en-GB")
    response = await client.http.post(
        "/a2ui/p9/reply", content=tampered, headers={"X-A2UI-Signature": sign_body(SECRET, signed)}
    )
    assert response.status_code == 401
    assert (await server.runtime.result("g3")).status == "suspended"
