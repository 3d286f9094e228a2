"""The operators' routes of the OpenAPI document: re-running a parked execution, dead
letters and queues (:mod:`loom.workers.openapi` holds the rest; the schedules'
:mod:`loom.workers.openapi_schedules`).

Request bodies are the routes' own pydantic models; the listings, which the routes build as
plain dicts, are described here by hand and checked against real answers by the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loom.ops.deadletters import KINDS
from loom.workers.deadletters_route import MAX_LIMIT

Operation = Callable[..., dict[str, Any]]

_NULLABLE_STRING = {"type": ["string", "null"]}

DEAD_LETTERS: dict[str, Any] = {
    "type": "object",
    "required": ["status", "dead_letters"],
    "properties": {
        "status": {"type": "string", "enum": list(KINDS)},
        "dead_letters": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["execution_id", "flow", "status", "reason", "updated_at"],
                "properties": {
                    "execution_id": {"type": "string"},
                    "flow": {"type": "string"},
                    "status": {"type": "string"},
                    "reason": _NULLABLE_STRING,
                    "updated_at": {"type": "number"},
                },
            },
        },
    },
}

REDRIVEN: dict[str, Any] = {
    "type": "object",
    "required": ["dry_run", "redriven"],
    "properties": {
        "dry_run": {"type": "boolean"},
        "redriven": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["execution_id", "flow", "reason", "action"],
                "properties": {
                    "execution_id": {"type": "string"},
                    "flow": {"type": "string"},
                    "reason": {"type": "string"},
                    "action": {"type": "string", "enum": ["retry", "fork", "none"]},
                    "new_execution_id": _NULLABLE_STRING,
                    "status": _NULLABLE_STRING,
                    "error": _NULLABLE_STRING,
                },
            },
        },
    },
}

QUEUES: dict[str, Any] = {
    "type": "object",
    "required": ["queues"],
    "properties": {
        "queues": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "concurrency", "rate_per_second", "in_flight", "waiting"],
                "properties": {
                    "name": {"type": "string"},
                    "concurrency": {"type": ["integer", "null"], "minimum": 1},
                    "rate_per_second": {"type": ["number", "null"], "exclusiveMinimum": 0},
                    "worker_concurrency": {"type": ["integer", "null"], "minimum": 1},
                    "in_flight": {"type": "integer", "minimum": 0},
                    "waiting": {"type": "integer", "minimum": 0},
                },
            },
        }
    },
}


def _query(name: str, schema: dict[str, Any], description: str, required: bool = False) -> Any:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


_LETTER_QUERY = [
    _query("status", {"type": "string", "enum": list(KINDS)}, "Which dead letters", True),
    _query("flow", {"type": "string", "minLength": 1}, "Only executions of this flow"),
    _query("since", {"type": "string"}, "Changed since an age (2h, 7d) or an ISO-8601 time"),
    _query(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
        "At most this many, oldest first",
    ),
]


def operator_paths(
    operation: Operation, plain: Callable[..., dict[str, Any]], execution_id: dict[str, Any]
) -> dict[str, Any]:
    """The paths of the operators' routes; ``operation`` and ``plain`` build an operation
    as the rest of the document does (``plain`` for a hand-written response schema)."""
    return {
        "/executions/{execution_id}/retry": {
            "post": operation(
                "retry",
                "Let a parked execution (poison, nondeterminism) run again on the code "
                "deployed now; authorized like a verdict (action retry); the body is optional",
                ("ExecutionResult", "Where the execution stands"),
                [400, 401, 403, 404, 413, 415],
                body="RetryRequest",
                body_required=False,
                secured=True,
                params=[execution_id],
            )
        },
        "/dead-letters": {
            "get": plain(
                "listDeadLetters",
                "Failed, poison or parked executions, oldest first",
                (DEAD_LETTERS, "The dead letters"),
                [400, 401, 403],
                params=_LETTER_QUERY,
            )
        },
        "/dead-letters/retry": {
            "post": plain(
                "redriveDeadLetters",
                "Re-drive dead letters: a parked one is retried, a failed one re-run as a fork "
                "from its failure (re-drives of failed executions are not selected unless "
                "named in execution_ids); authorized like a retry; dry_run writes nothing",
                (REDRIVEN, "What was (or, on a dry run, would be) done to each"),
                [400, 401, 403, 413, 415],
                body="RedriveRequest",
                secured=True,
            )
        },
        "/queues": {
            "get": plain(
                "listQueues",
                "Each declared queue's limits, leases in flight and executions waiting",
                (QUEUES, "The queues"),
                [401, 403],
            )
        },
    }
