"""``WebSocketCallFunctionTransport``: grain B over WebSocket, served by the Loom side.

A renderer connects to ``ws://HOST:PORT/a2ui/{surfaceId}``, which binds the connection to
that surface (an optional authenticator checks the handshake). ``call`` sends the
``callRendererFunction`` to the surface's connection — or, if none is open, when one opens —
and waits for the ``rendererFunctionResponse`` (or ``error``) carrying the same
``functionCallId``. Requests still waiting are sent again to a reconnecting renderer, with the
same call id (the renderer dedups).

A reply is taken only if it answers a call now waiting that was sent to the connection's own
surface (official replies name only the ``functionCallId``: the surface is Loom's record of
where the call went). Anything else — malformed, another version, unsolicited, late,
duplicate, from another surface's connection — is refused: logged, kept in
:attr:`~WebSocketCallFunctionTransport.refused`, and never handed to a waiting call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from loom.errors import ConfigurationError
from loom.extras import requires_extra
from loom.plugins.a2ui.effect import A2UICallFunctionTransport
from loom.plugins.a2ui.errors import A2UIProtocolError
from loom.plugins.a2ui.protocol import (
    CallRendererFunctionMessage,
    FunctionResponse,
    RendererFunctionResponseMessage,
    RendererToAgentMessage,
    function_outcome,
    parse_renderer_message,
)

with requires_extra("the A2UI WebSocket transport"):
    from websockets.asyncio.server import Server, ServerConnection, serve
    from websockets.exceptions import ConnectionClosed
    from websockets.http11 import Request, Response

log = logging.getLogger("loom.a2ui")

ConnectAuthenticator = Callable[[Mapping[str, str], str], bool]
"""``authenticate(handshake_headers, surface_id) -> bool``: True admits the connection."""

MessageHandler = Callable[[str, RendererToAgentMessage], Coroutine[Any, Any, None]]
"""Receives renderer messages other than replies (``action``, ``error``), with the surface."""


@dataclass
class _Waiting:
    surface_id: str
    message: CallRendererFunctionMessage
    reply: asyncio.Future[RendererFunctionResponseMessage]


@dataclass(frozen=True)
class RefusedReply:
    """A message the transport did not hand to any call, and why."""

    surface_id: str
    call_id: str | None
    reason: str


class WebSocketCallFunctionTransport(A2UICallFunctionTransport):
    """Serves clients over WebSocket and correlates their replies by surface and call id.

    Args:
        authenticate: Checks each handshake; a refused one gets HTTP 401.
        on_message: Receives the clients' other messages.
        path_prefix: URL path before the surface id.
    """

    def __init__(
        self,
        *,
        authenticate: ConnectAuthenticator | None = None,
        on_message: MessageHandler | None = None,
        path_prefix: str = "/a2ui/",
    ) -> None:
        self._authenticate = authenticate
        self._on_message = on_message
        self._prefix = path_prefix
        self._server: Server | None = None
        self._connections: dict[str, ServerConnection] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.refused: deque[RefusedReply] = deque(maxlen=256)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` (0 = an ephemeral port) and return the port."""
        self._server = await serve(self._serve, host, port, process_request=self._check_handshake)
        return self.port

    @property
    def port(self) -> int:
        """The port the server listens on."""
        if self._server is None:
            raise ConfigurationError("the WebSocket transport is not started")
        return int(next(iter(self._server.sockets)).getsockname()[1])

    def connected(self, surface_id: str) -> bool:
        """Whether a client of ``surface_id`` is connected now."""
        return surface_id in self._connections

    async def aclose(self) -> None:
        """Stop serving and fail the calls still waiting."""
        for waiting in self._waiting.values():
            if not waiting.reply.done():
                waiting.reply.set_exception(ConnectionError("transport closed"))
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # -- calls --------------------------------------------------------------------------

    async def call(
        self, surface_id: str, message: CallRendererFunctionMessage
    ) -> RendererFunctionResponseMessage:
        """Send ``message`` to ``surface_id``'s renderer and wait for the matching reply."""
        key = message.callRendererFunction.functionCallId
        waiting = _Waiting(surface_id, message, asyncio.get_running_loop().create_future())
        self._waiting[key] = waiting
        try:
            connection = self._connections.get(surface_id)
            if connection is not None:
                await self._send(connection, message)
            return await waiting.reply
        finally:
            if self._waiting.get(key) is waiting:
                del self._waiting[key]

    async def _send(
        self, connection: ServerConnection, message: CallRendererFunctionMessage
    ) -> None:
        # A closed connection is not an error here: the request waits for the next one.
        with contextlib.suppress(ConnectionClosed):
            await connection.send(message.to_json())

    # -- connections ----------------------------------------------------------------------

    def _surface_of(self, path: str) -> str | None:
        path = path.split("?", 1)[0]
        if not path.startswith(self._prefix):
            return None
        surface = unquote(path[len(self._prefix) :])
        return surface if surface and "/" not in surface else None

    def _check_handshake(self, connection: ServerConnection, request: Request) -> Response | None:
        surface = self._surface_of(request.path)
        if surface is None:
            hint = f"connect to {self._prefix}{{surfaceId}}\n"
            return connection.respond(HTTPStatus.NOT_FOUND, hint)
        headers = {k.lower(): v for k, v in request.headers.raw_items()}
        if self._authenticate is not None and not self._authenticate(headers, surface):
            return connection.respond(HTTPStatus.UNAUTHORIZED, "unauthenticated\n")
        return None

    async def _serve(self, connection: ServerConnection) -> None:
        surface = self._surface_of(connection.request.path if connection.request else "")
        if surface is None:
            return
        self._connections[surface] = connection
        try:
            for waiting in list(self._waiting.values()):
                if waiting.surface_id == surface:
                    await self._send(connection, waiting.message)
            async for raw in connection:
                self._receive(surface, raw)
        except ConnectionClosed:
            pass
        finally:
            if self._connections.get(surface) is connection:
                del self._connections[surface]

    def _receive(self, surface: str, raw: str | bytes) -> None:
        try:
            message = parse_renderer_message(raw)
        except A2UIProtocolError as exc:
            self._refuse(surface, None, f"malformed: {exc.message}")
            return
        outcome = function_outcome(message)
        if outcome is None:
            if self._on_message is not None:
                task = asyncio.get_running_loop().create_task(self._on_message(surface, message))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return
        self._match(surface, outcome)

    def _match(self, surface: str, reply: FunctionResponse) -> None:
        waiting = self._waiting.get(reply.functionCallId)
        if waiting is None or waiting.reply.done():
            self._refuse(
                surface, reply.functionCallId, "no call is waiting for it (unsolicited or late)"
            )
            return
        if waiting.surface_id != surface:
            self._refuse(
                surface, reply.functionCallId, f"the call went to surface {waiting.surface_id!r}"
            )
            return
        waiting.reply.set_result(RendererFunctionResponseMessage(rendererFunctionResponse=reply))

    def _refuse(self, surface: str, call_id: str | None, reason: str) -> None:
        log.warning("a2ui: refused reply on surface %r (call %r): %s", surface, call_id, reason)
        self.refused.append(RefusedReply(surface, call_id, reason))
