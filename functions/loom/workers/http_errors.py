"""How the HTTP worker answers an error: the status each kind of error calls for, the JSON
error body ``{"code", "message", "details"}``, and the access log line.

Bad input is never a 500; an internal error answers 500 (502 for a failing remote worker)
with an ``error_id`` that is also in the log line carrying the traceback.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from flask import Request, Response, request
from pydantic import BaseModel
from werkzeug.exceptions import HTTPException

from loom.errors import (
    EventNotFoundError,
    ExecutionConflictError,
    ExecutionFinishedError,
    ExecutionSupersededError,
    GateTimedOutError,
    InputError,
    LimitExceededError,
    LoomError,
    MailboxFullError,
    MessageConflictError,
    NotForkableError,
    NotPermittedError,
    PayloadTooLargeError,
    QueryFailedError,
    QueueDeduplicatedError,
    StaleVerdictError,
    StoreError,
    UnknownExecutionError,
    UnknownFlowError,
    UnknownQueryError,
    UnknownScheduleError,
    UnknownUpdateError,
    UpdateConflictError,
    UpdateRejectedError,
    WorkerError,
)
from loom.workers.auth import AuthError
from loom.workers.health import store_error_reply
from loom.workers.http_base import HttpError
from loom.workers.logs import bind, log_context, trace_fields

log = logging.getLogger("loom.worker")


_INPUT_STATUS: list[tuple[type[InputError], int]] = [
    (MailboxFullError, 429),  # (before its base class: retry once the flow read some)
    (LimitExceededError, 409),
    (UnknownFlowError, 404),
    (UnknownExecutionError, 404),
    (UnknownScheduleError, 404),
    (ExecutionConflictError, 409),
    (MessageConflictError, 409),
    (QueueDeduplicatedError, 409),
    (ExecutionFinishedError, 409),
    (GateTimedOutError, 409),
    (NotForkableError, 409),
    (EventNotFoundError, 404),
    (StaleVerdictError, 409),
    (NotPermittedError, 403),
    (PayloadTooLargeError, 413),
    (UpdateConflictError, 409),
    (UnknownUpdateError, 404),
    (UnknownQueryError, 404),
    (UpdateRejectedError, 422),
    (QueryFailedError, 422),
]


def input_status(exc: InputError) -> int:
    """The HTTP status of a bad-input error: 403, 404, 409, 413, 422, or 400."""
    for kind, status in _INPUT_STATUS:
        if isinstance(exc, kind):
            return status
    return 400


def error_reply(exc: Exception) -> tuple[int, dict[str, Any], dict[str, str]]:
    if isinstance(exc, HttpError):
        return exc.status, exc.to_json(), exc.headers
    if isinstance(exc, AuthError):
        headers = {"WWW-Authenticate": 'Bearer realm="loom"'} if exc.status == 401 else {}
        return exc.status, {"code": exc.code, "message": exc.message, "details": {}}, headers
    if isinstance(exc, ExecutionSupersededError):
        return 409, exc.to_json(), {}
    if isinstance(exc, InputError):
        status = input_status(exc)
        return status, exc.to_json(), {"Retry-After": "5"} if status == 429 else {}
    if isinstance(exc, StoreError):
        return store_error_reply(exc)
    return internal_error(exc)


def internal_error(exc: Exception) -> tuple[int, dict[str, Any], dict[str, str]]:
    """500 (502 for a failing remote worker) with an error id the log line also carries."""
    error_id = uuid.uuid4().hex
    bind(error_id=error_id)
    log.error("internal error %s: %s: %s", error_id, type(exc).__name__, exc, exc_info=exc)
    status = 502 if isinstance(exc, WorkerError) else 500
    if isinstance(exc, LoomError):
        # Loom's own errors name what is wrong (a bad LOOM_APP, a store that failed).
        code, message = exc.code, exc.message
    else:
        code, message = "internal", "internal error; the log entry with this error_id has more"
    return status, {"code": code, "message": message, "details": {"error_id": error_id}}, {}


def json_response(status: int, body: Any, headers: dict[str, str]) -> Response:
    if isinstance(body, BaseModel):
        text = body.model_dump_json()
    else:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
    response = Response(text, status=status, mimetype="application/json", headers=headers)
    response.headers["Cache-Control"] = "no-store"
    return response


def access_log(req: Request, status: int, seconds: float) -> None:
    level = logging.ERROR if status >= 500 else logging.INFO
    log.log(
        level,
        "%s %s %d",
        req.method,
        req.path,
        status,
        extra={
            "httpRequest": {
                "requestMethod": req.method,
                "requestUrl": req.path,
                "status": status,
                "latency": f"{seconds:.6f}s",
                "userAgent": req.headers.get("User-Agent", ""),
            }
        },
    )


def http_exception_reply(exc: HTTPException) -> Response:
    """The JSON error body for an error the web framework raised before the worker ran.

    functions-framework routes ``/<path:path>`` to the target, and that pattern does not
    match every path (one with an encoded newline, ``/robots.txt``); those answers would be
    HTML. Register this as the app's handler for ``HTTPException`` to keep them JSON.
    """
    status = exc.code or 500
    code = _FRAMEWORK_CODES.get(status) or (exc.name or "error").lower().replace(" ", "_")
    body: dict[str, Any] = {"code": code, "message": exc.description or exc.name, "details": {}}
    headers: dict[str, str] = {}
    allowed = getattr(exc, "valid_methods", None)  # a 405 says what is allowed (RFC 9110)
    if status == 405 and allowed:
        headers["Allow"] = ", ".join(allowed)
        body["details"] = {"allowed": list(allowed)}
    with log_context(**trace_fields(request.headers)):
        access_log(request, status, 0.0)
    return json_response(status, body, headers)


def store_error_response(exc: StoreError) -> Response:
    """503 with ``Retry-After`` for a store failure a framework-run target raised.

    Register it as the app's handler for ``StoreError``: the CloudEvent target raises to
    have a message redelivered, and a store failure is worth that, as a 503, not a 500.
    """
    status, body, headers = store_error_reply(exc)
    with log_context(**trace_fields(request.headers)):
        access_log(request, status, 0.0)
    return json_response(status, body, headers)


_FRAMEWORK_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    400: "bad_request",
}
