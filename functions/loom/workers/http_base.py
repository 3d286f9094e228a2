"""What the HTTP worker's routes share: errors, body parsing, the services, the caller
check, path matching.

A route function takes the worker's services, the request and the path parameters, and
returns ``(status, body)``; it raises :class:`HttpError`, an
:class:`~loom.workers.auth.AuthError` or a :class:`~loom.errors.LoomError` for the server to
turn into the JSON error body. Route modules import this one; the router
(:mod:`loom.workers.http_routes`) imports them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from flask import Request
from pydantic import BaseModel, ValidationError

from loom.runtime import Runtime
from loom.wire import ExecutionResult
from loom.workers.admission import Slots
from loom.workers.auth import (
    Action,
    Authenticator,
    AuthError,
    AuthRequest,
    Forbidden,
    Unauthenticated,
)
from loom.workers.base import WorkerRuntime
from loom.workers.logs import bind
from loom.workers.loop import PROCESS_LOOP

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Reply = tuple[int, Any]

# -- errors and body parsing -------------------------------------------------------------


class HttpError(Exception):
    """An answer other than 2xx decided by the HTTP layer (bad body, no route…)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details = details or {}
        self.headers = headers or {}

    def to_json(self) -> dict[str, Any]:
        """The JSON error body."""
        return {"code": self.code, "message": self.message, "details": self.details}


def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused with 413 if over ``limit`` bytes.

    Checked twice: the declared ``Content-Length`` before reading anything, and the bytes
    actually read (a chunked body declares no length).
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(declared, limit)
    data = request.stream.read(limit + 1)
    if len(data) > limit:
        raise _too_large(None, limit)
    return data


def _too_large(size: int | None, limit: int) -> HttpError:
    what = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return HttpError(
        413, "too_large", f"request body is {what}; the limit is {limit}", {"limit": limit}
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(request: Request, raw: bytes) -> dict[str, Any]:
    """Parse a JSON object body; 415 for another content type, 400 for anything malformed."""
    mimetype = request.mimetype
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        raise HttpError(
            415,
            "unsupported_media_type",
            f"send Content-Type: application/json, not {mimetype or 'nothing'!r}",
        )
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        # Lone surrogates decode from \ud800 escapes but cannot be stored as UTF-8.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError) as exc:
        raise HttpError(400, "malformed_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise HttpError(400, "malformed_json", "request body must be a JSON object")
    return value  # type: ignore[return-value]


def parse_model(model: type[M], data: dict[str, Any]) -> M:
    """Validate ``data`` against ``model``; 400 with the field errors if it does not fit."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        first = exc.errors()[0]
        if first["type"] == "invalid_execution_id":  # the id rule of loom.ids, named as such
            raise HttpError(400, first["type"], first["msg"], {"errors": errors}) from None
        raise HttpError(
            400,
            "invalid_request",
            f"request body does not fit {model.__name__}: {errors[0]['msg']}",
            {"errors": errors},
        ) from None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a runtime call on the process's shared event loop and wait for it.

    Not ``asyncio.run`` per request: async clients (Firestore's, any ``grpc.aio`` channel)
    stay bound to the first loop that used them, so every request must use the same one.
    The runtime holds no execution state between calls, so sharing it is safe.
    """
    return PROCESS_LOOP.run(coro)


# -- routes ---------------------------------------------------------------------------------


@dataclass
class Services:
    """What the routes use: built once per process from the environment.

    Attributes:
        runtime: Flows, effects and the store. Holds no execution state between requests.
        worker: Where ``POST /execute`` runs packages (``LocalWorkerRuntime(runtime)``).
        resume_auth: Checks resume requests (and names a start's principal when there is
            no caller authenticator).
        verdict_auth: Checks verdict requests.
        max_body: The request body limit in bytes.
        caller_auth: Checks every route's caller first, when configured.
        waiters: How many requests may wait at once (``GET …/events/{key}?timeout=``):
            half the server's slots, so waits never hold every thread (none: no bound).
    """

    runtime: Runtime
    worker: WorkerRuntime
    resume_auth: Authenticator
    verdict_auth: Authenticator
    max_body: int
    caller_auth: Authenticator | None = None
    waiters: Slots | None = None


CALLER = "loom.caller"
"""The ``environ`` key where the server leaves the principal the caller check returned."""


def caller(request: Request) -> str | None:
    """Who the caller authenticator said the request comes from, if one is configured."""
    value = request.environ.get(CALLER)
    return value if isinstance(value, str) else None


def bind_result(result: ExecutionResult) -> None:
    """Log where the execution stands, with the step it waits on or doubts."""
    step = None
    if result.in_doubt:
        step = result.in_doubt[0].step_id
    elif result.waiting_on:
        step = result.waiting_on[0].step_id
    bind(execution_id=result.execution_id, status=result.status, step_id=step)


def check_caller(
    s: Services,
    request: Request,
    action: str,
    execution_id: str,
    raw: bytes = b"",
    flow: str | None = None,
    *,
    disclose: bool = True,
) -> None:
    """Run the caller check (when configured) on ``execution_id``; leave who it names.

    Most routes are checked by the server before they read anything, on the execution in
    their path. Those in :data:`BODY_SCOPED` name theirs in the body: they parse it first
    (bounded, nothing done yet) and call this with the execution (and flow) it names.

    ``disclose=False`` where the execution or its flow came from the store, not from the
    caller (a re-drive's selection, an execute's stored flow): a refusal then answers with
    the check's status and a message of the worker's own, so it cannot tell the caller
    which execution was refused or what its flow is.
    """
    if s.caller_auth is None:
        return
    asked = AuthRequest(action, execution_id, request.headers, raw, flow)
    try:
        principal = s.caller_auth(asked)
    except AuthError as exc:
        if disclose:
            raise
        message = f"the caller may not {action} what this request acts on"
        hidden = Unauthenticated(message) if exc.status == 401 else Forbidden(message)
        raise hidden from None
    request.environ[CALLER] = principal
    bind(caller=principal)


def authorize(
    check: Authenticator, action: Action, execution_id: str, request: Request, raw: bytes
) -> str:
    """The principal ``check`` accepts; the caller's, when a caller check ran before."""
    principal = check(AuthRequest(action, execution_id, request.headers, raw))
    principal = caller(request) or principal
    bind(principal=principal)
    return principal


def path_segments(req: Request) -> list[str]:
    """The request path split into percent-decoded segments.

    Read from the raw request URI when the server gives it, so an execution id with an
    encoded ``/`` (``%2F``) stays one segment.
    """
    raw = req.environ.get("RAW_URI") or req.environ.get("REQUEST_URI")
    path = urlsplit(raw).path if isinstance(raw, str) and raw else req.path
    stripped = path.strip("/")
    if not stripped:
        return []
    return [unquote(part) for part in stripped.split("/")]


def match(pattern: tuple[str, ...], segments: list[str]) -> list[str] | None:
    """The path parameters if ``segments`` fit ``pattern`` (``"*"`` is one parameter)."""
    if len(pattern) != len(segments):
        return None
    args: list[str] = []
    for want, got in zip(pattern, segments, strict=True):
        if want == "*":
            if not got:
                return None
            args.append(got)
        elif want != got:
            return None
    return args


Route = Callable[[Services, Request, Sequence[str]], Reply]
"""A route: the worker's services, the request and the path's parameters to an answer."""
