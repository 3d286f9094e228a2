"""Schedules at run time over HTTP (:mod:`loom.primitives.schedule_admin`):

* ``POST /schedules``: create (``name``, ``cron``, ``flow``, ``input``, ``timezone``,
  ``catch_up``, ``start_at``, ``end_at``, ``paused``, ``note``);
* ``GET /schedules/{name}``: one schedule; ``PATCH /schedules/{name}``: update the fields
  given; ``DELETE /schedules/{name}``;
* ``POST /schedules/{name}/pause``, ``/unpause`` (``note``), ``/trigger``, ``/backfill``
  (``start``, ``end``: epoch seconds or ISO-8601 times).

A change is an operator's decision, authorized like a re-drive or a verdict (the verdict
authenticator, action ``schedule``) and recorded with who asked; the caller check (when
configured) is asked about action ``schedule`` (``list`` for a read), on no execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loom.primitives.schedule_admin import Schedules
from loom.workers.http_base import (
    HttpError,
    Reply,
    Request,
    Services,
    authorize,
    caller,
    check_caller,
    parse_json,
    parse_model,
    read_body,
    run,
)

_NAME = Field(min_length=1, max_length=200)
_CRON = Field(min_length=1, max_length=200)
_NOTE = Field(default="", max_length=1000)
Moment = float | datetime


class CreateSchedule(BaseModel):
    """``POST /schedules`` body."""

    model_config = ConfigDict(extra="forbid")

    name: str = _NAME
    cron: str = _CRON
    flow: str = Field(min_length=1, max_length=256)
    input: Any = None
    timezone: str = Field(default="UTC", min_length=1, max_length=64)
    catch_up: int = Field(default=0, ge=0, le=1000)
    start_at: Moment | None = None
    end_at: Moment | None = None
    paused: bool = False
    note: str = _NOTE


class UpdateSchedule(BaseModel):
    """``PATCH /schedules/{name}`` body: the fields to change (the others stay)."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(default=None, min_length=1, max_length=200)
    flow: str | None = Field(default=None, min_length=1, max_length=256)
    input: Any = None
    timezone: str | None = Field(default=None, min_length=1, max_length=64)
    catch_up: int | None = Field(default=None, ge=0, le=1000)
    start_at: Moment | None = None
    end_at: Moment | None = None
    note: str | None = Field(default=None, max_length=1000)


class Note(BaseModel):
    """``POST /schedules/{name}/pause`` and ``/unpause`` body."""

    model_config = ConfigDict(extra="forbid")

    note: str = _NOTE


class Backfill(BaseModel):
    """``POST /schedules/{name}/backfill`` body: the range ``[start, end)``."""

    model_config = ConfigDict(extra="forbid")

    start: Moment
    end: Moment


def _operator(s: Services, request: Request) -> tuple[str, bytes]:
    """Read the body and authorize the change; who asked, and the raw body."""
    raw = read_body(request, s.max_body)
    principal = authorize(s.verdict_auth, "schedule", "", request, raw)
    check_caller(s, request, "schedule", "", raw)
    return caller(request) or principal, raw


def _body(request: Request, raw: bytes) -> dict[str, Any]:
    return parse_json(request, raw) if raw.strip() else {}


def create_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /schedules``."""
    who, raw = _operator(s, request)
    body = parse_model(CreateSchedule, parse_json(request, raw))
    fields = body.model_dump(exclude={"name", "cron"})
    made = run(Schedules(s.runtime).create(body.name, body.cron, by=who, **fields))
    return 200, {"schedule": made}


def get_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /schedules/{name}``."""
    check_caller(s, request, "list", "")
    return 200, {"schedule": run(Schedules(s.runtime).get(args[0]))}


def update_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``PATCH /schedules/{name}``: the fields given (``input: null`` included) change."""
    who, raw = _operator(s, request)
    body = parse_model(UpdateSchedule, parse_json(request, raw))
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise HttpError(400, "invalid_request", "name at least one field to change", {})
    return 200, {"schedule": run(Schedules(s.runtime).update(args[0], by=who, **changes))}


def delete_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``DELETE /schedules/{name}``: the schedule goes, its executions stay."""
    _operator(s, request)
    run(Schedules(s.runtime).delete(args[0]))
    return 200, {"deleted": args[0]}


def pause_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /schedules/{name}/pause``."""
    who, raw = _operator(s, request)
    note = parse_model(Note, _body(request, raw)).note
    return 200, {"schedule": run(Schedules(s.runtime).pause(args[0], note=note, by=who))}


def unpause_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /schedules/{name}/unpause``."""
    who, raw = _operator(s, request)
    note = parse_model(Note, _body(request, raw)).note
    return 200, {"schedule": run(Schedules(s.runtime).unpause(args[0], note=note, by=who))}


def trigger_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /schedules/{name}/trigger``: one run now."""
    _operator(s, request)
    return 200, {"fired": run(Schedules(s.runtime).trigger(args[0])).to_json()}


def backfill_schedule(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /schedules/{name}/backfill``: every tick of ``[start, end)``, once each."""
    _, raw = _operator(s, request)
    body = parse_model(Backfill, parse_json(request, raw))
    fired = run(Schedules(s.runtime).backfill(args[0], body.start, body.end))
    return 200, {"fired": [f.to_json() for f in fired]}


ROUTES = [
    ("POST", ("schedules",), create_schedule),
    ("GET", ("schedules", "*"), get_schedule),
    ("PATCH", ("schedules", "*"), update_schedule),
    ("DELETE", ("schedules", "*"), delete_schedule),
    ("POST", ("schedules", "*", "pause"), pause_schedule),
    ("POST", ("schedules", "*", "unpause"), unpause_schedule),
    ("POST", ("schedules", "*", "trigger"), trigger_schedule),
    ("POST", ("schedules", "*", "backfill"), backfill_schedule),
]
"""The run-time schedule routes (mounted by :mod:`loom.workers.http_routes`; they run their
own checks, the server's caller check on a path execution does not apply)."""
