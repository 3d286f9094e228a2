"""Grain B over a real WebSocket on loopback: correlation, refusals, reconnects, timeouts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from loom import FlowContext, Loom
from loom import events as ev
from loom.plugins.a2ui import call_client_function, register_a2ui_call_function
from loom.plugins.a2ui.websocket import WebSocketCallFunctionTransport
from loom.testing import LoomTestEnv, replay
from loom.wire import ExecutionResult

CAT = "example.com:ws-tests/v1"


def admit(headers: Mapping[str, str], surface: str) -> bool:
    return headers.get("authorization") == f"Bearer tok-{surface}"


@pytest.fixture
async def transport() -> AsyncIterator[WebSocketCallFunctionTransport]:
    t = WebSocketCallFunctionTransport(authenticate=admit)
    await t.start("127.0.0.1", 0)
    yield t
    await t.aclose()


def make_app(transport: WebSocketCallFunctionTransport, timeout: float = 5.0) -> Loom:
    app = Loom("ws-tests")
    call_fn = register_a2ui_call_function(app, transport, timeout)

    @app.flow("submit")
    async def submit(ctx: FlowContext, order_id: str) -> Any:
        return await call_client_function(
            ctx, call_fn, "s1", "confirmAndSubmit", {"orderId": order_id}, catalog_id=CAT
        )

    return app


def client(
    transport: WebSocketCallFunctionTransport, surface: str = "s1", token: str | None = None
) -> connect:
    headers = {"Authorization": f"Bearer {token or f'tok-{surface}'}"}
    return connect(
        f"ws://127.0.0.1:{transport.port}/a2ui/{surface}",
        additional_headers=headers,
        proxy=None,
        open_timeout=5,
    )


async def next_call(ws: ClientConnection) -> dict[str, Any]:
    message = json.loads(await asyncio.wait_for(ws.recv(), 5))
    assert message["version"] == "v1.0"
    return message["callRendererFunction"]


def reply(call: dict[str, Any], version: str = "v1.0", **changes: Any) -> str:
    call_id = call["functionCallId"]
    body = {"functionCallId": call_id, "value": {"submissionId": f"sub-{call_id}"}, **changes}
    return json.dumps({"version": version, "rendererFunctionResponse": body})


async def test_round_trip_with_forged_and_unsolicited_replies_refused(
    transport: WebSocketCallFunctionTransport,
) -> None:
    env = LoomTestEnv(make_app(transport))
    async with client(transport) as ws:
        run = asyncio.create_task(env.start("submit", "A-1", execution_id="e1"))
        call = await next_call(ws)
        assert call["functionCallId"] == "e1:1"
        assert call["callFunction"] == {
            "call": "confirmAndSubmit",
            "args": {"orderId": "A-1"},
            "catalogId": CAT,
        }
        async with client(transport, surface="s2") as other:
            await other.send(reply(call))  # right call id, wrong surface's connection
            await asyncio.sleep(0.05)
        await ws.send(reply(call, functionCallId="e1:2"))
        await ws.send(reply(call, version="v0.9"))
        await ws.send("{not json")
        await ws.send(reply(call))
        result: ExecutionResult = await asyncio.wait_for(run, 5)
        await ws.send(reply(call))  # a duplicate after the step completed
        await asyncio.sleep(0.05)
    assert (result.status, result.output) == ("completed", {"submissionId": "sub-e1:1"})
    reasons = [r.reason for r in transport.refused]
    assert len(reasons) == 5, reasons
    assert "went to surface 's1'" in reasons[0]
    assert "unsolicited" in reasons[1] and "not spoken" in reasons[2]
    assert reasons[3].startswith("malformed") and "late" in reasons[4]
    outcome = await replay(make_app(WebSocketCallFunctionTransport()), await env.history("e1"))
    assert outcome.output == result.output


async def test_handshakes_are_authenticated_and_bound_to_a_surface(
    transport: WebSocketCallFunctionTransport,
) -> None:
    with pytest.raises(InvalidStatus) as caught:
        async with client(transport, token="tok-other"):
            pass
    assert caught.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as caught:
        async with connect(f"ws://127.0.0.1:{transport.port}/elsewhere", proxy=None):
            pass
    assert caught.value.response.status_code == 404


async def test_a_waiting_request_is_sent_again_to_a_reconnecting_client(
    transport: WebSocketCallFunctionTransport,
) -> None:
    env = LoomTestEnv(make_app(transport))
    run = asyncio.create_task(env.start("submit", "A-2", execution_id="e2"))
    await asyncio.sleep(0.05)  # the request waits: no client yet
    async with client(transport) as ws:
        first = await next_call(ws)
    assert not run.done()
    async with client(transport) as ws:
        again = await next_call(ws)
        assert again == first  # same call id: the client can dedup
        await ws.send(reply(again))
        result = await asyncio.wait_for(run, 5)
    assert result.status == "completed"


async def test_a_client_that_never_answers_fails_the_step_at_the_timeout(
    transport: WebSocketCallFunctionTransport,
) -> None:
    env = LoomTestEnv(make_app(transport, timeout=0.2))
    async with client(transport) as ws:
        result = await asyncio.wait_for(env.start("submit", "A-3", execution_id="e3"), 5)
        call = await next_call(ws)
        await ws.send(reply(call))  # too late: nobody waits any more
        await asyncio.sleep(0.05)
    assert result.status == "failed"
    [failed] = [e for e in await env.history("e3") if isinstance(e, ev.EffectFailed)]
    assert failed.error.type == "A2UITimeoutError" and "within 0.2s" in failed.error.message
    assert transport.refused[-1].call_id == "e3:1"
