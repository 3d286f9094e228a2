"""The example's server: the embedded runtime on SQLite, SSE + POST for grain A, WebSocket for B.

Run by the example (``python -m examples.a2ui_callfunction``) as a child process, so it can be
killed for real::

    A2UI_DEMO_SECRET=... python -m examples.a2ui_callfunction.server --store PATH

It prints ``READY {"http": PORT, "ws": PORT}`` once it listens on loopback. Routes:

=======================================  ============================================
``GET  /a2ui/{surface}/events``          SSE: the surface's ``callFunction`` requests
``POST /a2ui/{surface}/reply``           a ``functionResponse`` (signed): resumes a gate
``POST /executions``                     start a flow (signed), runs in the background
``GET  /executions/{id}``                where it stands
``POST /executions/{id}/execute``        rebuild and run it here (signed)
``POST /executions/{id}/verdict``        resolve an in-doubt step (signed)
``ws://…/a2ui/{surface}``                grain B; ``Authorization: Bearer sign(surface)``
=======================================  ============================================

Every POST carries ``X-A2UI-Signature: sha256=HMAC(secret, body)``; the reply route hands the
check to :func:`~loom.plugins.a2ui.deliver_function_response` as its resume authenticator.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from examples.a2ui_callfunction.app import CATALOG, build_app
from examples.a2ui_callfunction.web import (
    HttpError,
    HttpRequest,
    read_request,
    send_event,
    send_json,
    start_event_stream,
    surface_token,
)
from loom.errors import InputError, LoomError, UnknownExecutionError
from loom.plugins.a2ui import (
    A2UIMessageSender,
    A2UIProtocolError,
    CallRendererFunctionMessage,
    CatalogValidationError,
    CorrelationError,
    ResumeAuthenticationError,
    deliver_function_response,
    hmac_authenticator,
    parse_function_outcome,
)
from loom.plugins.a2ui.websocket import WebSocketCallFunctionTransport
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage, ExecutionResult

_STATUS = {
    ResumeAuthenticationError: 401,
    UnknownExecutionError: 404,
    CorrelationError: 409,
    CatalogValidationError: 422,
    A2UIProtocolError: 400,
}


class SseHub(A2UIMessageSender):
    """Queues each surface's requests until its SSE stream takes them; remembers who asked."""

    def __init__(self) -> None:
        self._queues: dict[str, asyncio.Queue[CallRendererFunctionMessage]] = {}
        self._by_call: dict[str, tuple[str, str]] = {}

    def queue(self, surface_id: str) -> asyncio.Queue[CallRendererFunctionMessage]:
        """The surface's outbox."""
        return self._queues.setdefault(surface_id, asyncio.Queue())

    def execution_for(self, call_id: str, surface_id: str) -> str | None:
        """The execution that sent call ``call_id`` to ``surface_id``, if one did.

        Only routing: whether the execution still awaits that call is for the log to say.
        """
        sent = self._by_call.get(call_id)
        return sent[0] if sent is not None and sent[1] == surface_id else None

    async def send(
        self, execution_id: str, surface_id: str, message: CallRendererFunctionMessage
    ) -> None:
        self._by_call[message.callRendererFunction.functionCallId] = (execution_id, surface_id)
        self.queue(surface_id).put_nowait(message)


class DemoServer:
    """The example's server over one SQLite store.

    Args:
        store_path: The SQLite file (shared with whoever runs the next process).
        secret: Shared with the client: signs POST bodies and WebSocket tokens.
        request_timeout: Bound on one grain-B call.
    """

    def __init__(self, store_path: Path, secret: bytes, request_timeout: float = 10.0) -> None:
        self.secret = secret
        self.hub = SseHub()
        self.transport = WebSocketCallFunctionTransport(authenticate=self._ws_ok)
        self.runtime = Runtime(
            build_app(self.hub, self.transport, request_timeout), SqliteEventStore(store_path)
        )
        self.authenticate = hmac_authenticator(secret)
        self._http: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def _ws_ok(self, headers: Mapping[str, str], surface_id: str) -> bool:
        given = headers.get("authorization", "")
        return hmac.compare_digest(given, f"Bearer {surface_token(self.secret, surface_id)}")

    async def start(
        self, host: str = "127.0.0.1", http_port: int = 0, ws_port: int = 0
    ) -> tuple[int, int]:
        """Listen; return ``(http_port, ws_port)``."""
        self._http = await asyncio.start_server(self._handle, host, http_port)
        ws = await self.transport.start(host, ws_port)
        return int(self._http.sockets[0].getsockname()[1]), ws

    async def aclose(self) -> None:
        """Stop listening, cancel background runs and open streams, close the store."""
        if self._http is not None:
            self._http.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.transport.aclose()
        await self.runtime.store.aclose()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track(asyncio.current_task())
        try:
            request = await read_request(reader)
            await self._route(request, writer)
        except HttpError as exc:
            await send_json(writer, exc.status, {"code": exc.code, "message": exc.message})
        except LoomError as exc:
            status = next((s for t, s in _STATUS.items() if isinstance(exc, t)), None)
            status = status or (400 if isinstance(exc, InputError) else 500)
            await send_json(writer, status, exc.to_json())
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(ConnectionError):
                writer.close()

    async def _route(self, request: HttpRequest, writer: asyncio.StreamWriter) -> None:
        match (request.method, request.parts):
            case ("GET", ["health"]):
                await send_json(writer, 200, {"healthy": True})
            case ("GET", ["a2ui", surface, "events"]):
                await self._stream(surface, writer)
            case ("POST", ["a2ui", surface, "reply"]):
                await send_json(writer, 200, await self._reply(surface, request))
            case ("POST", ["executions"]):
                await send_json(writer, 202, self._start(self._signed(request)))
            case ("GET", ["executions", eid]):
                await send_json(writer, 200, _view(await self.runtime.result(eid)))
            case ("POST", ["executions", eid, "execute"]):
                self._signed(request)
                result = await self.runtime.execute(ExecutionPackage(execution_id=eid))
                await send_json(writer, 200, _view(result))
            case ("POST", ["executions", eid, "verdict"]):
                body = self._signed(request)
                result = await self.runtime.verdict(
                    eid,
                    body["step_id"],
                    body["verdict"],
                    output=body.get("output"),
                    by=body.get("by", "operator"),
                )
                await send_json(writer, 200, _view(result))
            case _:
                raise HttpError(404, "not_found", f"no route {request.method} {request.path}")

    def _signed(self, request: HttpRequest) -> Any:
        if not self.authenticate(request.headers, request.body):
            raise ResumeAuthenticationError("missing or bad X-A2UI-Signature")
        return request.json()

    async def _stream(self, surface: str, writer: asyncio.StreamWriter) -> None:
        await start_event_stream(writer)
        queue = self.hub.queue(surface)
        while True:
            message = await queue.get()
            try:
                call_id = message.callRendererFunction.functionCallId
                await send_event(writer, "callRendererFunction", message.to_json(), call_id)
            except ConnectionError:
                queue.put_nowait(message)  # the next stream of this surface gets it
                return

    async def _reply(self, surface: str, request: HttpRequest) -> dict[str, Any]:
        reply = parse_function_outcome(request.body)  # a response, or an error for the call
        execution_id = self.hub.execution_for(reply.functionCallId, surface)
        if execution_id is None:
            raise CorrelationError(
                f"no call {reply.functionCallId!r} was sent to surface {surface!r}; refused"
            )
        # The plugin checks the rest against the log — signature, a call this execution
        # awaits — and the result against the catalog, then resumes.
        result = await deliver_function_response(
            self.runtime,
            execution_id,
            request.body,
            headers=request.headers,
            authenticate=self.authenticate,
            catalog=CATALOG,
        )
        return {"accepted": True, "execution_id": execution_id, "status": result.status}

    def _start(self, body: Any) -> dict[str, Any]:
        eid = str(body["execution_id"])
        self._track(
            asyncio.get_running_loop().create_task(
                self.runtime.start(body["flow"], body.get("input"), execution_id=eid)
            )
        )
        return {"execution_id": eid}

    def _track(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def _view(result: ExecutionResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude={"state"})


async def _serve(args: argparse.Namespace, secret: bytes) -> None:
    server = DemoServer(Path(args.store), secret, args.request_timeout)
    http_port, ws_port = await server.start(args.host, args.http_port, args.ws_port)
    print("READY " + json.dumps({"http": http_port, "ws": ws_port}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.aclose()


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m examples.a2ui_callfunction.server``."""
    parser = argparse.ArgumentParser(description="The A2UI callFunction example's server.")
    parser.add_argument("--store", required=True, help="SQLite file of the event log")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=0)
    parser.add_argument("--ws-port", type=int, default=0)
    parser.add_argument("--request-timeout", type=float, default=10.0)
    args = parser.parse_args(argv)
    secret = os.environ.get("A2UI_DEMO_SECRET", "")
    if not secret:
        sys.exit("set A2UI_DEMO_SECRET to the secret shared with the client")
    asyncio.run(_serve(args, secret.encode()))


if __name__ == "__main__":
    main()
