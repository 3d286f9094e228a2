"""A browser-free renderer: the official A2UI Python ``RpcHandler`` answers Loom's calls.

The renderer's functions live in an official ``a2ui-core`` catalog, and every
``callRendererFunction`` is run by a2ui-core's ``RpcHandler``, which checks the catalog, the
caller (``allowedCallers``) and the arguments, and builds the ``rendererFunctionResponse``.
This module only carries messages:

- Grain A: follows ``GET /a2ui/{surface}/events`` (SSE) and answers each call with a
  ``POST /a2ui/{surface}/reply`` signed with the shared secret.
- Grain B: holds ``ws://…/a2ui/{surface}`` open and answers on the same socket.

``confirmAndSubmit`` has a side effect, so it dedups on the ``functionCallId``: its ledger (a
JSON file, the renderer's durable record) maps each call id to the result it gave, and a
repeated request gets the recorded result instead of a second submission. An operator
resolving an in-doubt step reads the same ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
from a2ui.core.catalog import Catalog
from a2ui.core.catalog.functions import FunctionImplementation
from a2ui.core.rpc import RpcHandler
from a2ui.core.schema.v1_0 import CallRendererFunctionMessage as OfficialCall
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from examples.a2ui_callfunction.app import CATALOG
from examples.a2ui_callfunction.web import surface_token
from loom.plugins.a2ui import (
    CallRendererFunctionPayload,
    is_call_renderer_function,
    parse_agent_message,
    sign_body,
)

BeforeReply = Callable[[CallRendererFunctionPayload], Awaitable[None]]

_CALL_ID: contextvars.ContextVar[str] = contextvars.ContextVar("a2ui_function_call_id")


class DemoClient:
    """One user's device, with its locale and its submission ledger.

    Args:
        http_base: ``http://127.0.0.1:PORT`` of the server.
        ws_base: ``ws://127.0.0.1:PORT`` of the server.
        secret: Shared with the server.
        ledger_path: Where the renderer keeps its dedup record of submissions.
    """

    def __init__(self, http_base: str, ws_base: str, secret: bytes, ledger_path: Path) -> None:
        self.http = httpx.AsyncClient(base_url=http_base, trust_env=False, timeout=10.0)
        self.ws_base = ws_base
        self.secret = secret
        self.ledger_path = ledger_path
        self.locale, self.time_zone = "fr-FR", "Europe/Paris"
        self.received: list[CallRendererFunctionPayload] = []
        self.reply_statuses: list[tuple[str, int]] = []
        self.submissions = 0
        self.before_reply: BeforeReply | None = None
        self.rpc = RpcHandler(catalogs=[self._catalog()])
        self._tasks: set[asyncio.Task[None]] = set()

    def _catalog(self) -> Catalog[Any, Any]:
        """The renderer's functions, declared as the example's catalog declares them."""
        impls = {"getLocale": self._get_locale, "confirmAndSubmit": self._confirm_and_submit}
        functions = [
            FunctionImplementation(
                fn.name,
                return_type=fn.returnType,
                schema=fn.args,
                allowed_callers=fn.allowedCallers,
                execute=impls.get(fn.name, lambda args: None),
            )
            for fn in CATALOG
        ]
        return Catalog(catalog_id=CATALOG.catalog_id, protocol_version="1.0", functions=functions)

    # -- the renderer's functions ------------------------------------------------------------

    def ledger(self) -> dict[str, Any]:
        """Call id → result of every submission this renderer made."""
        if not self.ledger_path.exists():
            return {}
        return json.loads(self.ledger_path.read_text())

    def _get_locale(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"locale": self.locale, "timeZone": self.time_zone}

    def _confirm_and_submit(self, args: dict[str, Any]) -> dict[str, Any]:
        call_id = _CALL_ID.get()
        ledger = self.ledger()
        if call_id in ledger:  # asked again (a retry, a recovery): same answer, no resubmit
            return ledger[call_id]
        digest = hashlib.sha256(call_id.encode()).hexdigest()[:10]
        result = {"submissionId": f"sub-{digest}", "confirmed": True}
        ledger[call_id] = result
        tmp = self.ledger_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(ledger, indent=2))
        tmp.replace(self.ledger_path)  # durable before anyone is told
        self.submissions += 1
        return result

    async def answer(self, wire: dict[str, Any]) -> dict[str, Any]:
        """Run a ``callRendererFunction`` through the official handler; return its reply."""
        call = OfficialCall.model_validate(wire)
        self.received.append(
            CallRendererFunctionPayload.model_validate(wire["callRendererFunction"])
        )
        token = _CALL_ID.set(call.call_renderer_function.function_call_id)
        try:
            return await self.rpc.handle_call_renderer_function_async(call)
        finally:
            _CALL_ID.reset(token)

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
                    wire = json.loads(line.removeprefix("data: "))
                    if is_call_renderer_function(parse_agent_message(wire)):
                        reply = await self.answer(wire)
                        await self.post_reply(surface_id, json.dumps(reply).encode())

    async def post_reply(self, surface_id: str, body: bytes, *, sign: bool = True) -> int:
        """POST a reply body; return the HTTP status."""
        headers = {"Content-Type": "application/json"}
        if sign:
            headers["X-A2UI-Signature"] = sign_body(self.secret, body)
        response = await self.http.post(f"/a2ui/{surface_id}/reply", content=body, headers=headers)
        reply = json.loads(body).get("rendererFunctionResponse", {})
        self.reply_statuses.append((reply.get("functionCallId", "?"), response.status_code))
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
        wire = json.loads(raw)
        if not is_call_renderer_function(parse_agent_message(wire)):
            return
        reply = await self.answer(wire)
        if self.before_reply is not None:
            await self.before_reply(self.received[-1])
        await ws.send(json.dumps(reply))

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
            raise ConnectionError("could not open the renderer's connection to the server")

    async def aclose(self) -> None:
        """Close every connection."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.http.aclose()
