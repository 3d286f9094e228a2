"""Just enough HTTP/1.1 on ``asyncio`` streams for the example: JSON routes and an SSE stream.

One request per connection (``Connection: close``), bodies by ``Content-Length`` only. It is
here so the example has no web framework to install; a real deployment puts the same
handlers behind its own server.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from loom.plugins.a2ui import sign_body

MAX_BODY = 64 * 1024


class HttpError(Exception):
    """Answer the request with ``status`` and a JSON error body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class HttpRequest:
    """A parsed request: method, decoded path segments, lower-cased headers, raw body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def parts(self) -> list[str]:
        """The path's segments, percent-decoded (``/a/b%2Fc`` → ``["a", "b/c"]``)."""
        return [unquote(p) for p in self.path.strip("/").split("/") if p]

    def json(self) -> Any:
        """The body as JSON, or a 400."""
        try:
            return json.loads(self.body or b"null")
        except json.JSONDecodeError as exc:
            raise HttpError(400, "malformed", f"body is not JSON: {exc.msg}") from None


async def read_request(reader: asyncio.StreamReader) -> HttpRequest:
    """Read one request from ``reader``."""
    line = (await reader.readline()).decode("latin-1").strip()
    method, target, *_ = [*line.split(" "), "", ""]
    if not method or not target.startswith("/"):
        raise HttpError(400, "malformed", "bad request line")
    headers: dict[str, str] = {}
    while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    if length > MAX_BODY:
        raise HttpError(413, "too_large", f"body over {MAX_BODY} bytes")
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(method.upper(), target.split("?", 1)[0], headers, body)


async def send_json(writer: asyncio.StreamWriter, status: int, value: Any) -> None:
    """Write a complete JSON response."""
    body = json.dumps(value, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()


async def start_event_stream(writer: asyncio.StreamWriter) -> None:
    """Write the head of a ``text/event-stream`` response; events follow until close."""
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )
    await writer.drain()


async def send_event(writer: asyncio.StreamWriter, event: str, data: str, event_id: str) -> None:
    """Write one SSE event (``data`` must be a single line, as compact JSON is)."""
    writer.write(f"id: {event_id}\nevent: {event}\ndata: {data}\n\n".encode())
    await writer.drain()


def surface_token(secret: bytes, surface_id: str) -> str:
    """The bearer token a client presents to open a surface's WebSocket."""
    return sign_body(secret, surface_id.encode())
