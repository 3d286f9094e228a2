"""A browser-free A2UI client: runs catalog functions when the server asks, and answers.

- Grain A: follows ``GET /a2ui/{surface}/events`` (SSE) and answers each ``callFunction`` with
  a ``POST /a2ui/{surface}/reply`` signed with the shared secret.
- Grain B: holds ``ws://…/a2ui/{surface}`` open and answers on the same socket.

``confirmAndSubmit`` has a side effect, so it dedups on ``callId``: its ledger (a JSON file,
the client's durable record) maps each call id to the result it gave, and a repeated request
gets the recorded result instead of a second submission. An operator resolving an in-doubt
step reads the same ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from examples.a2ui_callfunction.web import surface_token
from loom.plugins.a2ui import (
    CallFunctionPayload,
    FunctionResponseMessage,
    FunctionResponsePayload,
    is_call_function,
    parse_server_message,
    sign_body,
)

BeforeReply = Callable[[CallFunctionPayload], Awaitable[None]]


class DemoClient:
    """One user's device, with its locale and its submission ledger.

    Args:
        http_base: ``http://127.0.0.1:PORT`` of the server.
        ws_base: ``ws://127.0.0.1:PORT`` of the server.
        secret: Shared with the server.
        ledger_path: Where the client keeps its dedup record of submissions.
    """

    def __init__(self, http_base: str, ws_base: str, secret: bytes, ledger_path: Path) -> None:
        self.http = httpx.AsyncClient(base_url=http_base, trust_env=False, timeout=10.0)
        self.ws_base = ws_base
        self.secret = secret
        self.ledger_path = ledger_path
        self.locale, self.time_zone = "fr-FR", "Europe/Paris"
        self.received: list[CallFunctionPayload] = []
        self.reply_statuses: list[tuple[str, int]] = []
        self.submissions = 0
        self.before_reply: BeforeReply | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the client's functions ------------------------------------------------------------

    def ledger(self) -> dict[str, Any]:
        """Call id → result of every submission this client made."""
        if not self.ledger_path.exists():
            return {}
        return json.loads(self.ledger_path.read_text())

    def run_function(self, call: CallFunctionPayload) -> FunctionResponseMessage:
        """Run the requested function and build the reply."""
        self.received.append(call)
        reply: dict[str, Any] = {
            "surfaceId": call.surfaceId,
            "callId": call.callId,
            "name": call.name,
        }
        if call.name == "getLocale":
            reply["result"] = {"locale": self.locale, "timeZone": self.time_zone}
        elif call.name == "confirmAndSubmit":
            reply["result"] = self._confirm_and_submit(call)
        else:
            reply["error"] = {"code": "unknown_function", "message": f"no function {call.name}"}
        return FunctionResponseMessage(functionResponse=FunctionResponsePayload(**reply))

    def _confirm_and_submit(self, call: CallFunctionPayload) -> dict[str, Any]:
        ledger = self.ledger()
        if call.callId in ledger:  # asked again (a retry, a recovery): same answer, no resubmit
            return ledger[call.callId]
        digest = hashlib.sha256(call.callId.encode()).hexdigest()[:10]
        result = {"submissionId": f"sub-{digest}", "confirmed": True}
        ledger[call.callId] = result
        tmp = self.ledger_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(ledger, indent=2))
        tmp.replace(self.ledger_path)  # durable before anyone is told
        self.submissions += 1
        return result

    # -- grain A: SSE down, POST up ----------------------------------------------------------

    async def follow_events(self, surface_id: str) -> None:
        """Start answering the surface's requests from its SSE stream (returns once open)."""
        await self._spawn(lambda opened: self._sse(surface_id, opened))

    async def _sse(self, surface_id: str, opened: asyncio.Event) -> None:
        with contextlib.suppress(httpx.HTTPError):
            async with self.http.stream("GET", f"/a2ui/{surface_id}/events") as response:
                opened.set()
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    message = parse_server_message(line.removeprefix("data: "))
                    if is_call_function(message):
                        reply = self.run_function(message.callFunction)
                        await self.post_reply(surface_id, reply.to_json().encode())

    async def post_reply(self, surface_id: str, body: bytes, *, sign: bool = True) -> int:
        """POST a reply body; return the HTTP status."""
        headers = {"Content-Type": "application/json"}
        if sign:
            headers["X-A2UI-Signature"] = sign_body(self.secret, body)
        response = await self.http.post(f"/a2ui/{surface_id}/reply", content=body, headers=headers)
        call_id = json.loads(body).get("functionResponse", {}).get("callId", "?")
        self.reply_statuses.append((call_id, response.status_code))
        return response.status_code

    # -- grain B: WebSocket ------------------------------------------------------------------

    async def connect(self, surface_id: str) -> None:
        """Open the surface's WebSocket and start answering on it (returns once open)."""
        await self._spawn(lambda opened: self._ws(surface_id, opened))

    async def _ws(self, surface_id: str, opened: asyncio.Event) -> None:
        token = surface_token(self.secret, surface_id)
        url = f"{self.ws_base}/a2ui/{surface_id}"
        with contextlib.suppress(ConnectionClosed, OSError):
            async with connect(
                url, additional_headers={"Authorization": f"Bearer {token}"}, proxy=None
            ) as ws:
                opened.set()
                async for raw in ws:
                    await self._answer_ws(ws, raw)

    async def _answer_ws(self, ws: ClientConnection, raw: str | bytes) -> None:
        message = parse_server_message(raw)
        if not is_call_function(message):
            return
        reply = self.run_function(message.callFunction)
        if self.before_reply is not None:
            await self.before_reply(message.callFunction)
        await ws.send(reply.to_json())

    # -- plumbing ------------------------------------------------------------------------------

    async def _spawn(self, loop: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
        opened = asyncio.Event()
        task = asyncio.get_running_loop().create_task(loop(opened))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        waiter = asyncio.get_running_loop().create_task(opened.wait())
        try:
            await asyncio.wait([task, waiter], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not opened.is_set():
            task.cancel()
            raise ConnectionError("could not open the client's connection to the server")

    async def aclose(self) -> None:
        """Close every connection."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.http.aclose()
