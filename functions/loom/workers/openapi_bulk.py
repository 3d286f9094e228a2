"""The bulk operations' routes of the OpenAPI document (:mod:`loom.workers.bulk_routes`).

The request bodies are the routes' pydantic models; the report, which the route builds as a
plain dict (:meth:`loom.ops.bulk.BulkReport.to_json`), is described here by hand and
checked against real answers by the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_NULLABLE_STRING = {"type": ["string", "null"]}

REPORT: dict[str, Any] = {
    "type": "object",
    "required": ["operation", "dry_run", "count", "more", "items"],
    "properties": {
        "operation": {"type": "string", "enum": ["cancel", "resume", "retry"]},
        "dry_run": {"type": "boolean"},
        "count": {"type": "integer", "minimum": 0},
        "more": {"type": "boolean"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["execution_id", "flow", "status", "action"],
                "properties": {
                    "execution_id": {"type": "string"},
                    "flow": {"type": "string"},
                    "status": {"type": "string"},
                    "action": {
                        "type": "string",
                        "enum": ["cancel", "resume", "retry", "fork", "none", "skip"],
                    },
                    "outcome": _NULLABLE_STRING,
                    "detail": _NULLABLE_STRING,
                    "error": _NULLABLE_STRING,
                },
            },
        },
    },
}

_WHAT = {
    "cancel": "Cancel every execution the body selects (each cleans up as on its own); "
    "authorized like a cancel",
    "resume": "Resume a gate of every execution the body selects (its one open gate on "
    "'on', or correlation_key); authorized like a resume",
    "retry": "Retry every dead letter the body selects: a parked one runs again, a failed "
    "one is re-driven as a fork from its failure; authorized like a retry",
}


def bulk_paths(plain: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The paths of ``POST /bulk/{cancel,resume,retry}``; ``plain`` builds an operation as
    the rest of the document does."""
    return {
        f"/bulk/{name}": {
            "post": plain(
                f"bulk{name.capitalize()}",
                f"{_WHAT[name]}. Every selected execution is checked by the caller check "
                "before any is acted on (one refusal: 403, nothing done, naming it); "
                "dry_run writes nothing",
                (REPORT, "What was (or, on a dry run, would be) done to each"),
                [400, 401, 403, 404, 413, 415],
                body=f"Bulk{name.capitalize()}Request",
                secured=True,
            )
        }
        for name in ("cancel", "resume", "retry")
    }
