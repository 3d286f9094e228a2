"""Routes for updates and queries, mounted by :mod:`loom.workers.http_routes`.

* ``POST /executions/{id}/updates``: send an update (see :mod:`loom.primitives.updates`).
  Checked like a resume or a message (the same authenticator; the principal it names is
  recorded as ``by``). Waits up to ``wait`` seconds (default 30, at most 60) for the
  handler's answer: 200 with the update's outcome (``completed`` with ``output``, or
  ``failed`` with ``error``), 202 when it is accepted and not answered yet (ask
  ``GET …/updates/{update_id}``). A refused update is 422 ``update_rejected`` or
  ``unknown_update_handler``, nothing written; a used ``update_id`` with another name or
  arguments 409 ``conflicting_update``. A signed request without ``update_id`` is named after
  its signature (:mod:`loom.workers.signed_ids`): a copy of it is the same update.
* ``GET /executions/{id}/updates/{update_id}[?wait=s]``: where an update stands, waiting up
  to ``wait`` seconds (default 0) for its answer; checked as a read.
* ``POST /executions/{id}/query``: the value of a query handler (see
  :mod:`loom.primitives.queries`), nothing written; checked as a read.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Generator, Sequence
from typing import Any, Final

from flask import Request
from pydantic import BaseModel, ConfigDict, Field

from loom.ids import check_execution_id
from loom.primitives.update_calls import MAX_UPDATE_ID, UpdateOutcome, outcome
from loom.workers.http_base import (
    HttpError,
    Reply,
    Services,
    authorize,
    parse_json,
    parse_model,
    read_body,
    run,
)
from loom.workers.logs import bind
from loom.workers.signed_ids import signed_default_id

MAX_WAIT: Final = 60.0
DEFAULT_WAIT: Final = 30.0


class UpdateRequest(BaseModel):
    """``POST /executions/{id}/updates``: one update for the flow's handler ``name``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=256, description="The update handler's name.")
    args: Any = Field(default=None, description="The handler's argument (JSON).")
    update_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_UPDATE_ID,
        description="Makes a retried request the same update, answered the same (another "
        "name or other arguments under a used id: 409 conflicting_update). Default: a new "
        "update per unsigned request; a signed one is named after its signature.",
    )
    wait: float = Field(
        default=DEFAULT_WAIT,
        ge=0,
        le=MAX_WAIT,
        description="Seconds to wait for the handler's answer before answering 202.",
    )


class QueryRequest(BaseModel):
    """``POST /executions/{id}/query``: ask the flow's query handler ``name``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=256, description="The query handler's name.")
    args: Any = Field(default=None, description="The handler's argument (JSON).")


class QueryAnswer(BaseModel):
    """What a query handler computed where the execution stands."""

    execution_id: str
    name: str
    value: Any = None


def send_update(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/updates``: authenticated as a resume, validated, accepted,
    answered (or 202)."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    by = authorize(s.resume_auth, "resume", execution_id, request, raw)
    body = parse_model(UpdateRequest, parse_json(request, raw))
    bind(update=body.name)
    # A signed request's copy is the same update (see loom.workers.signed_ids).
    uid = body.update_id or signed_default_id(request.headers, "resume", execution_id, "sig:")

    async def call() -> UpdateOutcome:
        rt = s.runtime
        got = await rt.start_update(execution_id, body.name, body.args, update_id=uid, by=by)
        if got.status != "accepted" or body.wait <= 0:
            return got
        with waiting(s, body.wait):
            return await outcome(rt, execution_id, got.update_id, body.wait)

    got = run(call())
    bind(update_id=got.update_id, update_status=got.status)
    return (202 if got.status == "accepted" else 200), got


def get_update(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /executions/{id}/updates/{update_id}[?wait=s]``: where the update stands."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id, update_id=args[1])
    wait = seconds(request, "wait", 0.0)
    with waiting(s, wait):
        got = run(outcome(s.runtime, execution_id, args[1], wait))
    return (202 if got.status == "accepted" else 200), got


def query(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/query``: the query handler's value; nothing written."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    body = parse_model(QueryRequest, parse_json(request, read_body(request, s.max_body)))
    bind(query=body.name)
    value = run(s.runtime.query(execution_id, body.name, body.args))
    return 200, QueryAnswer(execution_id=execution_id, name=body.name, value=value)


@contextlib.contextmanager
def waiting(s: Services, wait: float) -> Generator[None]:
    """Hold one of the instance's waiter places while a request waits ``wait`` seconds (none
    for a request that does not wait); 429 ``too_many_waiters`` when none is free, as a
    waiter on a published value is answered."""
    waiters = s.waiters if wait > 0 else None
    if waiters is not None and not waiters.try_enter():
        raise HttpError(
            429,
            "too_many_waiters",
            f"{waiters.size} requests wait in this instance already; retry shortly, or ask "
            "without waiting",
            {"waiters": waiters.size},
            {"Retry-After": "1"},
        )
    try:
        yield
    finally:
        if waiters is not None:
            waiters.leave()


def seconds(request: Request, name: str, default: float, most: float = MAX_WAIT) -> float:
    """The query parameter ``name`` as seconds from 0 to ``most`` (400 otherwise)."""
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= most:
        raise HttpError(
            400,
            "invalid_request",
            f"query parameter {name!r} must be seconds between 0 and {most:g}, got {raw!r}",
            {"parameter": name},
        )
    return value
