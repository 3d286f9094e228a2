"""The OpenAPI 3.1 document of the HTTP worker, served at ``GET /openapi.json``.

Schemas come from the pydantic models the routes validate with and answer with, so the
document cannot drift from the code; the tests check real answers against it.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

import loom.workers.http_routes  # noqa: F401  # pyright: ignore[reportUnusedImport]  (the routes the document describes)
from loom import __version__
from loom.ids import MAX_ID_BYTES, rule
from loom.wire import ExecutionResult
from loom.workers.bulk_routes import BulkCancelRequest, BulkResumeRequest, BulkRetryRequest
from loom.workers.cancel_route import CancelRequest
from loom.workers.deadletters_route import RedriveRequest
from loom.workers.fork_route import ForkRequest
from loom.workers.http_messages import MessageRequest, PublishedEvent
from loom.workers.http_models import (
    ErrorBody,
    ExecuteRequest,
    ExecutionView,
    Health,
    Liveness,
    ResumeRequest,
    StartRequest,
    VerdictRequest,
)
from loom.workers.openapi_bulk import bulk_paths
from loom.workers.openapi_interact import MODELS as _INTERACT_MODELS
from loom.workers.openapi_interact import interaction_paths
from loom.workers.openapi_ops import operator_paths
from loom.workers.openapi_schedules import schedule_paths
from loom.workers.retry_route import RetryRequest
from loom.workers.schedule_admin_routes import Backfill, CreateSchedule, Note, UpdateSchedule

_REF = "#/components/schemas/{model}"

_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (ExecuteRequest, "validation"),
    (StartRequest, "validation"),
    (ResumeRequest, "validation"),
    (VerdictRequest, "validation"),
    (CancelRequest, "validation"),
    (ForkRequest, "validation"),
    (MessageRequest, "validation"),
    (RetryRequest, "validation"),
    (RedriveRequest, "validation"),
    (BulkCancelRequest, "validation"),
    (BulkResumeRequest, "validation"),
    (BulkRetryRequest, "validation"),
    (CreateSchedule, "validation"),
    (UpdateSchedule, "validation"),
    (Note, "validation"),
    (Backfill, "validation"),
    (PublishedEvent, "serialization"),
    (ExecutionResult, "serialization"),
    (ExecutionView, "serialization"),
    (Health, "serialization"),
    (Liveness, "serialization"),
    (ErrorBody, "serialization"),
    *_INTERACT_MODELS,
]

_ERRORS = {
    400: "Malformed JSON, or a body that does not fit the schema",
    401: "No credential came with the request",
    403: "The credential does not allow this",
    404: "Unknown execution, flow or schedule",
    405: "Method not allowed on this path",
    409: "Superseded (another holder owns the execution), a conflicting start or "
    "message, a request for a finished execution, a reply to a gate whose timeout "
    "passed first (code gate_timed_out), an execution at one of its limits (code "
    "limit_exceeded), or a queue's deduplication id held by a queued or running execution "
    "(code queue_deduplicated)",
    413: "Request body over the limit (default 1 MiB), or a payload over a store limit "
    "(code store_limit, the limit in details; not worth a retry)",
    415: "Content-Type is not application/json",
    422: "An update its validator refused, or that names no handler where the flow stands "
    "(codes update_rejected, unknown_update_handler, execution_parked), or a query whose "
    "handler raised (query_failed): nothing was written",
    429: "The execution's run holds as many messages as it may (code mailbox_full), or "
    "enough requests wait on published values already (code too_many_waiters); retry "
    "after Retry-After seconds",
    500: "Internal error; details.error_id is also in the log line",
    503: "The store failed or cannot answer now (busy, disk full, read-only, unreachable); "
    "retry after Retry-After seconds: the log keeps only what was durably recorded",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(
    op_id: str,
    summary: str,
    ok: tuple[str, str],
    errors: list[int],
    **options: Any,
) -> dict[str, Any]:
    return _plain(op_id, summary, (_ref(ok[0]), ok[1]), errors, **options)


def _plain(
    op_id: str,
    summary: str,
    ok: tuple[dict[str, Any], str],
    errors: list[int],
    *,
    body: str | None = None,
    body_required: bool = True,
    secured: bool = False,
    params: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": _json(ok[0], ok[1])}
    for status in sorted({*errors, 405, 500, 503}):
        responses[str(status)] = _json(_ref("ErrorBody"), _ERRORS[status])
    operation: dict[str, Any] = {"operationId": op_id, "summary": summary, "responses": responses}
    if body is not None:
        operation["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    if secured:
        operation["security"] = [{"bearer": []}, {"signature": []}]
    if params:
        operation["parameters"] = params
    return operation


_ID = {
    "name": "execution_id",
    "in": "path",
    "required": True,
    "description": f"An execution id: {rule()}; percent-encoded in the path. An id "
    "breaking the rule is refused with 400 invalid_execution_id, nothing written.",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_BYTES},
}
_HISTORY = {
    "name": "history",
    "in": "query",
    "required": False,
    "description": "Include the events (default true).",
    "schema": {"type": "string", "enum": ["true", "false", "1", "0", "yes", "no"]},
}

_AFTER = {
    "name": "after",
    "in": "query",
    "required": False,
    "description": "Return events after this seq (default 0: from the start).",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
_LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "description": "At most this many events (1 to 10000, default 1000).",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}


_VERSIONS: dict[str, Any] = {
    "type": "object",
    "required": ["versions"],
    "properties": {
        "versions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["flow", "version", "live", "registered", "latest"],
                "properties": {
                    "flow": {"type": "string"},
                    "version": {"type": "string"},
                    "live": {"type": "integer", "minimum": 0},
                    "registered": {"type": ["boolean", "null"]},
                    "latest": {"type": "boolean"},
                },
            },
        }
    },
}


def _paths() -> dict[str, Any]:
    return {
        "/health": {
            "get": {
                "operationId": "health",
                "summary": "Readiness: the app loads and the store answers a cheap check in time",
                "responses": {
                    "200": _json(_ref("Health"), "Ready"),
                    "405": _json(_ref("ErrorBody"), _ERRORS[405]),
                    "503": _json(
                        _ref("Health"),
                        "Not ready: a bad app or store configuration, or a store that cannot "
                        "answer (error.message says why)",
                    ),
                },
            }
        },
        "/live": {
            "get": {
                "operationId": "live",
                "summary": "Liveness: the process answers HTTP (checks nothing else)",
                "responses": {
                    "200": _json(_ref("Liveness"), "Alive"),
                    "405": _json(_ref("ErrorBody"), _ERRORS[405]),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {
                    "200": _json({"type": "object"}, "The OpenAPI document"),
                    "405": _json(_ref("ErrorBody"), _ERRORS[405]),
                },
            }
        },
        "/versions": {
            "get": {
                "operationId": "listVersions",
                "summary": "Live executions per flow version (a version with none can go)",
                "responses": {
                    "200": _json(_VERSIONS, "Every version registered here or still live"),
                    "405": _json(_ref("ErrorBody"), _ERRORS[405]),
                },
            }
        },
        "/execute": {
            "post": _operation(
                "execute",
                "One execute call: allocate, execute, release (ADR 0002)",
                ("ExecutionResult", "Where the execution stands"),
                [400, 401, 403, 404, 409, 413, 415],
                body="ExecuteRequest",
            )
        },
        "/executions": {
            "post": _operation(
                "start",
                "Start a flow (idempotent by execution_id) and run it until it blocks; "
                "capabilities are granted only if the caller may grant them (403 otherwise)",
                ("ExecutionResult", "Where the execution stands"),
                [400, 401, 403, 404, 409, 413, 415],
                body="StartRequest",
            )
        },
        "/executions/{execution_id}": {
            "get": _operation(
                "getExecution",
                "State and history of an execution, the history a page at a time "
                "(next_after names the next page's after)",
                ("ExecutionView", "The execution and its events"),
                [400, 401, 403, 404],
                params=[_ID, _HISTORY, _AFTER, _LIMIT],
            )
        },
        "/executions/{execution_id}/resume": {
            "post": _operation(
                "resume",
                "Deliver a resume to a gate (buffered if early; duplicates are no-ops)",
                ("ExecutionResult", "Where the execution stands"),
                [400, 401, 403, 404, 409, 413, 415],
                body="ResumeRequest",
                secured=True,
                params=[_ID],
            )
        },
        "/executions/{execution_id}/verdict": {
            "post": _operation(
                "verdict",
                "Settle one in-doubt episode of a step (a settled or other episode: 409)",
                ("ExecutionResult", "Where the execution stands"),
                [400, 401, 403, 404, 409, 413, 415],
                body="VerdictRequest",
                secured=True,
                params=[_ID],
            )
        },
        "/executions/{execution_id}/cancel": {
            "post": _operation(
                "cancel",
                "Cancel an execution: its flow gets CancelledError at its next await and may "
                "run compensations before it ends cancelled (a finished one: 409)",
                ("ExecutionResult", "Where the execution stands"),
                [400, 401, 403, 404, 409, 413, 415],
                body="CancelRequest",
                secured=True,
                params=[_ID],
            )
        },
        "/executions/{execution_id}/fork": {
            "post": _operation(
                "fork",
                "A new execution reusing the recorded steps before from_step (409 when they "
                "cannot be reused); the original is untouched",
                ("ExecutionResult", "Where the new execution stands"),
                [400, 401, 403, 404, 409, 413, 415],
                body="ForkRequest",
                secured=True,
                params=[_ID],
            )
        },
        "/executions/{execution_id}/messages": {
            "post": _operation(
                "sendMessage",
                "Deliver a message to the execution's mailbox on a topic (checked like a "
                "resume; a repeated message_id with the same topic and payload is a no-op, "
                "with another one 409 conflicting_message) and run it",
                ("ExecutionResult", "Where the execution stands"),
                [400, 401, 403, 404, 409, 413, 415, 429],
                body="MessageRequest",
                secured=True,
                params=[_ID],
            )
        },
        "/executions/{execution_id}/events/{key}": {
            "get": _operation(
                "getEvent",
                "The latest value the flow published under key, waiting up to timeout "
                "seconds (at most 60) for a first one; 404 event_not_found if none; 429 "
                "too_many_waiters when half the instance's request slots wait already",
                ("PublishedEvent", "The value"),
                [400, 401, 403, 404, 429],
                params=[_ID, _KEY, _TIMEOUT],
            )
        },
        **operator_paths(_operation, _plain, _ID),
        **bulk_paths(_plain),
        **interaction_paths(_operation, _ID),
        **schedule_paths(_plain),
    }


_KEY = {"name": "key", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
_TIMEOUT = {
    "name": "timeout",
    "in": "query",
    "required": False,
    "description": "Seconds to wait for a first value (default 0, at most 60).",
    "schema": {"type": "number", "minimum": 0, "maximum": 60},
}


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI document (built once)."""
    _, schemas = models_json_schema(_MODELS, ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Loom worker",
            "version": __version__,
            "description": "The HTTP worker of Loom for Cloud Run.",
        },
        "paths": _paths(),
        "components": {
            "schemas": schemas["$defs"],
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The shared secret, or a token your "
                    "authenticator verifies (a Google ID token with LOOM_CALLER_AUTH, which "
                    "then guards every route but /health, /live and /openapi.json)",
                },
                "signature": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Loom-Signature",
                    "description": "t=<expires>,sha256=HMAC-SHA256(secret, "
                    "'{action}\\n{execution_id}\\n{expires}\\n' + body), hex; expires in "
                    "epoch seconds, at most an hour ahead",
                },
            },
        },
    }
