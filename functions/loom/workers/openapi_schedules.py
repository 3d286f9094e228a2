"""The OpenAPI paths and schemas of the schedule routes (:mod:`loom.workers.schedule_routes`
and :mod:`loom.workers.schedule_admin_routes`); :mod:`loom.workers.openapi` holds the rest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCHEDULE: dict[str, Any] = {
    "type": "object",
    "required": ["name", "cron", "timezone", "flow", "catch_up", "next_fire", "paused"],
    "properties": {
        "name": {"type": "string"},
        "cron": {"type": "string"},
        "timezone": {"type": "string", "description": "An IANA time zone"},
        "flow": {"type": "string"},
        "input": {},
        "catch_up": {"type": "integer", "minimum": 0},
        "start_at": {"type": ["number", "null"], "description": "Epoch seconds"},
        "end_at": {"type": ["number", "null"], "description": "Epoch seconds"},
        "since": {
            "type": ["number", "null"],
            "description": "When it was created or first seen declared: its first tick is after",
        },
        "declared": {"type": "boolean", "description": "Declared in the app's code"},
        "paused": {"type": "boolean"},
        "note": {"type": "string"},
        "next_fire": {"type": ["string", "null"], "description": "UTC, ISO 8601; none if paused"},
        "next_execution_id": {"type": ["string", "null"]},
    },
}
SCHEDULES: dict[str, Any] = {
    "type": "object",
    "required": ["schedules"],
    "properties": {"schedules": {"type": "array", "items": SCHEDULE}},
}
ONE: dict[str, Any] = {
    "type": "object",
    "required": ["schedule"],
    "properties": {"schedule": SCHEDULE},
}
FIRED: dict[str, Any] = {
    "type": "object",
    "required": ["schedule", "tick", "execution_id", "started", "status"],
    "properties": {
        "schedule": {"type": "string"},
        "tick": {"type": "string"},
        "execution_id": {"type": "string"},
        "started": {"type": "boolean"},
        "status": {"type": "string"},
        "error": {"type": ["string", "null"]},
    },
}
_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The schedule's name, percent-encoded in the path",
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
}
_ERRORS = [400, 401, 403, 404, 413, 415]
_AUTH = "; authorized like a re-drive (the verdict check, action schedule)"


def schedule_paths(plain: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The schedule routes' paths; ``plain`` builds an operation as the document does."""
    one = (ONE, "The schedule")
    return {
        "/schedules": {
            "get": plain(
                "listSchedules",
                "Every schedule, declared in code and made at run time, with its next fire",
                (SCHEDULES, "The schedules"),
                [401, 403],
            ),
            "post": plain(
                "createSchedule",
                "Make a schedule at run time; its first tick is the first after now" + _AUTH,
                one,
                _ERRORS,
                body="CreateSchedule",
                secured=True,
            ),
        },
        "/schedules/{name}": {
            "get": plain("getSchedule", "One schedule", one, [401, 403, 404], params=[_NAME]),
            "patch": plain(
                "updateSchedule",
                "Change the fields given of a schedule made at run time" + _AUTH,
                one,
                _ERRORS,
                body="UpdateSchedule",
                secured=True,
                params=[_NAME],
            ),
            "delete": plain(
                "deleteSchedule",
                "Delete a schedule made at run time (its executions stay)" + _AUTH,
                ({"type": "object", "properties": {"deleted": {"type": "string"}}}, "Deleted"),
                _ERRORS,
                secured=True,
                params=[_NAME],
            ),
        },
        "/schedules/{name}/pause": _note("pauseSchedule", "Start no tick until unpaused", plain),
        "/schedules/{name}/unpause": _note(
            "unpauseSchedule", "Fire its ticks again, from the next one", plain
        ),
        "/schedules/{name}/trigger": {
            "post": plain(
                "triggerSchedule",
                "Start one execution now, paused or not" + _AUTH,
                ({"type": "object", "properties": {"fired": FIRED}}, "What it started"),
                _ERRORS,
                secured=True,
                params=[_NAME],
            )
        },
        "/schedules/{name}/backfill": {
            "post": plain(
                "backfillSchedule",
                "Start every tick of [start, end), each once (at most 1000)" + _AUTH,
                (
                    {"type": "object", "properties": {"fired": {"type": "array", "items": FIRED}}},
                    "What it started or found",
                ),
                _ERRORS,
                body="Backfill",
                secured=True,
                params=[_NAME],
            )
        },
    }


def _note(op_id: str, summary: str, plain: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return {
        "post": plain(
            op_id,
            summary + _AUTH,
            (ONE, "The schedule"),
            _ERRORS,
            body="Note",
            body_required=False,
            secured=True,
            params=[_NAME],
        )
    }
