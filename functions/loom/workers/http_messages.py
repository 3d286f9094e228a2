"""Routes for messages and published state, mounted by :mod:`loom.workers.http_routes`.

* ``POST /executions/{id}/messages``: deliver a message (see :mod:`loom.primitives.messages`). Checked
  like a resume: the same authenticator, and the principal it names is recorded as ``by``.
  A signed request without ``message_id`` is named after its signature
  (:mod:`loom.workers.signed_ids`); a used id with another body is 409
  ``conflicting_message``.
* ``GET /executions/{id}/events/{key}[?timeout=s]``: the value published under ``key``
  (see :mod:`loom.primitives.published`), waiting up to ``timeout`` seconds (at most 60) for a first
  one; 404 ``event_not_found`` when there is none. A wait costs a summary read per poll,
  not a load of the state; it holds a server thread, so at most half the instance's slots
  wait at once (429 ``too_many_waiters`` with ``Retry-After`` past that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flask import Request
from pydantic import BaseModel, ConfigDict, Field

from loom.ids import check_execution_id
from loom.primitives.published import MAX_WAIT
from loom.workers.logs import bind
from loom.workers.signed_ids import signed_default_id

if TYPE_CHECKING:
    from loom.workers.http_base import Reply, Services


class MessageRequest(BaseModel):
    """``POST /executions/{id}/messages``: one message for the execution's mailbox."""

    model_config = ConfigDict(extra="forbid")

    topic: str = Field(
        min_length=1,
        max_length=256,
        description="The id rule's alphabet: no control or format characters, no edge spaces.",
    )
    payload: Any = None
    message_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Makes a retried request a no-op (the same topic and payload again; "
        "another one under a used id is refused with 409 conflicting_message). Default: "
        "every unsigned request is a new message; a signed one is named after its "
        "signature, so a copy of it is a no-op ('sig:{digest}', a form no request may "
        "name). The id rule's alphabet: no control or format characters, no edge spaces.",
    )


class PublishedEvent(BaseModel):
    """``GET /executions/{id}/events/{key}``: the latest value published under ``key``."""

    execution_id: str
    key: str
    value: Any = None


def send_message(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/messages``: authenticated as a resume, delivered, run."""
    from loom.workers.http_base import (
        authorize,
        parse_json,
        parse_model,
        read_body,
        run,
    )

    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    by = authorize(s.resume_auth, "resume", execution_id, request, raw)
    body = parse_model(MessageRequest, parse_json(request, raw))
    bind(topic=body.topic)
    # A signed request's copy is the same message (see loom.workers.signed_ids).
    derived = body.message_id is None
    mid = body.message_id or signed_default_id(request.headers, "resume", execution_id, "sig:")
    result = run(
        s.runtime.send(
            execution_id, body.topic, body.payload, message_id=mid, by=by, derived_id=derived
        )
    )
    return 200, result


def get_event(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /executions/{id}/events/{key}[?timeout=s]``: read (or wait for) a value."""
    from loom.workers.http_base import run

    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    timeout = _timeout(request)
    waiters = s.waiters if timeout > 0 else None
    if waiters is not None and not waiters.try_enter():
        from loom.workers.http_base import HttpError

        raise HttpError(
            429,
            "too_many_waiters",
            f"{waiters.size} requests wait on published values in this instance already; "
            "retry shortly, or ask without a timeout",
            {"waiters": waiters.size},
            {"Retry-After": "1"},
        )
    try:
        value = run(s.runtime.get_event(execution_id, args[1], timeout))
    finally:
        if waiters is not None:
            waiters.leave()
    return 200, PublishedEvent(execution_id=execution_id, key=args[1], value=value)


def _timeout(request: Request) -> float:
    from loom.workers.http_base import HttpError

    raw = request.args.get("timeout", "0")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_WAIT:
        raise HttpError(
            400,
            "invalid_request",
            f"query parameter 'timeout' must be seconds between 0 and {MAX_WAIT:g}, got {raw!r}",
            {"parameter": "timeout"},
        )
    return value
