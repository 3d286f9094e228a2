"""Refuse a request whose declared ``Content-Length`` is over the limit, before anything
reads its body.

functions-framework reads the whole request body after every response (so that answering
early does not break the connection), and its CloudEvent view reads the body before the
function runs. A request declaring 100 GB and sending 10 bytes would hold a worker thread
until that body came, and its client would never get an answer. :func:`guard_declared_length`
answers such a request 413 at once, as a streamed response: functions-framework leaves the
body of a streamed response unread, and ``Connection: close`` ends the connection.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import flask

from loom.workers.server import DEFAULT_MAX_BODY

#: Pub/Sub push bodies carry up to 10 MB of message data, base64-encoded.
EVENTS_MAX_BODY = 16 * 1024 * 1024


def body_limit(target: str) -> int:
    """The body limit of a target: ``LOOM_MAX_BODY_BYTES`` (default 1 MiB), 16 MiB for events.

    A malformed ``LOOM_MAX_BODY_BYTES`` counts as the default here; the worker reports it.
    """
    if target == "events":
        return EVENTS_MAX_BODY
    raw = os.environ.get("LOOM_MAX_BODY_BYTES", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_BODY


def too_large(declared: int, limit: int) -> flask.Response:
    """The 413 answer, streamed so that nothing reads the request body afterwards."""
    body = {
        "code": "too_large",
        "message": f"request body is {declared} bytes; the limit is {limit}",
        "details": {"limit": limit},
    }

    def chunks() -> Iterator[bytes]:
        yield json.dumps(body).encode()

    response = flask.Response(chunks(), status=413, mimetype="application/json")
    response.headers["Connection"] = "close"
    response.headers["Cache-Control"] = "no-store"
    return response


def guard_declared_length(app: flask.Flask, limit: int) -> None:
    """Answer 413 before the view runs when a request declares more than ``limit`` bytes."""

    def refuse() -> flask.Response | None:
        declared = flask.request.content_length
        if declared is not None and declared > limit:
            return too_large(declared, limit)
        return None

    app.before_request(refuse)
