"""The routes of the HTTP worker: body parsing, one function each (request and response
models: :mod:`loom.workers.http_models`).

A route function takes the worker's services, the request and the path parameters, and
returns ``(status, body)``; it raises :class:`HttpError`, an
:class:`~loom.workers.auth.AuthError` or a :class:`~loom.errors.LoomError` for the server to
turn into the JSON error body. Nothing here keeps state between requests: each call reads
what it needs from the store through the runtime.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from flask import Request
from pydantic import BaseModel, ValidationError

from loom.grants import ANONYMOUS
from loom.ids import check_execution_id
from loom.kernel.fold import fold
from loom.primitives.continuation import run_chain
from loom.primitives.queues import queue_ref
from loom.runtime import Runtime
from loom.wire import ExecutionResult
from loom.workers.auth import Action, Authenticator, AuthRequest
from loom.workers.base import WorkerRuntime
from loom.workers.http_models import (
    ExecuteRequest,
    ExecutionView,
    ResumeRequest,
    StartRequest,
)
from loom.workers.http_versions import list_versions
from loom.workers.logs import bind
from loom.workers.loop import PROCESS_LOOP
from loom.workers.signed_ids import signed_default_id

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
    """

    runtime: Runtime
    worker: WorkerRuntime
    resume_auth: Authenticator
    verdict_auth: Authenticator
    max_body: int
    caller_auth: Authenticator | None = None


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
) -> None:
    """Run the caller check (when configured) on ``execution_id``; leave who it names.

    Most routes are checked by the server before they read anything, on the execution in
    their path. Those in :data:`BODY_SCOPED` name theirs in the body: they parse it first
    (bounded, nothing done yet) and call this with the execution (and flow) it names.
    """
    if s.caller_auth is None:
        return
    principal = s.caller_auth(AuthRequest(action, execution_id, request.headers, raw, flow))
    request.environ[CALLER] = principal
    bind(caller=principal)


def execute(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /execute``: allocate → execute → release on the injected worker."""
    raw = read_body(request, s.max_body)
    body = parse_model(ExecuteRequest, parse_json(request, raw))
    package = body.executionPackage
    check_caller(s, request, "execute", package.execution_id, raw, package.flow)
    bind(execution_id=package.execution_id)
    result = run(s.worker.run(package))
    bind_result(result)
    return 200, result


def start(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions``: start (idempotent), then run until it blocks."""
    raw = read_body(request, s.max_body)
    body = parse_model(StartRequest, parse_json(request, raw))
    check_caller(s, request, "start", body.execution_id or "", raw, body.flow)
    by = _start_principal(s, request, raw, body)
    # A signed request's copy is the same start (see loom.workers.signed_ids).
    eid = body.execution_id or signed_default_id(request.headers, "start", "", "sig-")
    bind(execution_id=eid, flow=body.flow)
    result = run(
        s.runtime.start(
            body.flow,
            body.input,
            execution_id=eid,
            capabilities=body.capabilities,
            by=by,
            version=body.version,
            queue=queue_ref(body.queue, body.partition_key),
            timeout=body.timeout,
        )
    )
    bind_result(result)
    return 200, result


def _start_principal(s: Services, request: Request, raw: bytes, body: StartRequest) -> str:
    """Who starts: the caller; else whoever the resume check accepts; else ``anonymous``.

    The grant policy then decides which of the asked capabilities that principal may grant.
    """
    who = caller(request)
    if who is not None:
        return who
    if "Authorization" in request.headers or "X-Loom-Signature" in request.headers:
        return authorize(s.resume_auth, "start", body.execution_id or "", request, raw)
    bind(principal=ANONYMOUS)
    return ANONYMOUS


def authorize(
    check: Authenticator, action: Action, execution_id: str, request: Request, raw: bytes
) -> str:
    """The principal ``check`` accepts; the caller's, when a caller check ran before."""
    principal = check(AuthRequest(action, execution_id, request.headers, raw))
    principal = caller(request) or principal
    bind(principal=principal)
    return principal


def resume(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /executions/{id}/resume``: authenticated, then appended and run."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    raw = read_body(request, s.max_body)
    by = authorize(s.resume_auth, "resume", execution_id, request, raw)
    body = parse_model(ResumeRequest, parse_json(request, raw))
    result = run(s.runtime.resume(execution_id, body.on, body.correlation_key, body.payload, by=by))
    bind_result(result)
    return 200, result


def _flag(request: Request, name: str, default: bool) -> bool:
    raw = request.args.get(name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise HttpError(
        400,
        "invalid_request",
        f"query parameter {name!r} must be true or false",
        {"parameter": name},
    )


def get_execution(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /executions/{id}[?history=false]``: state and history."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    with_history = _flag(request, "history", True)

    async def view() -> ExecutionView:
        await s.runtime.require(execution_id)
        if not with_history:
            return ExecutionView(execution=await s.runtime.result(execution_id))
        # One read: the state is folded from the very events returned, so they agree.
        events = await s.runtime.history(execution_id)
        execution = await s.runtime.report(fold(events))
        return ExecutionView(
            execution=execution, history=events, runs=run_chain(execution_id, events)
        )

    return 200, run(view())


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

BODY_SCOPED: set[Route] = {execute, start}
"""Routes whose execution is named in the body, not the path: the server leaves their
caller check to them (:func:`check_caller`, after the body is parsed). By identity, not
name, so no other route can skip the check by sharing a name."""

# (method, path pattern with "*" for a parameter, function)
ROUTES: list[tuple[str, tuple[str, ...], Route]] = [
    ("POST", ("execute",), execute),
    ("POST", ("executions",), start),
    ("GET", ("executions", "*"), get_execution),
    ("POST", ("executions", "*", "resume"), resume),
    ("GET", ("versions",), list_versions),
]

_ACTIONS = {"get_execution": "read", "list_executions": "list"}


def route_action(route: Route) -> str:
    """What the caller check is told a route does: ``start``, ``read``, ``cancel``..."""
    name = getattr(route, "__name__", "call")
    return _ACTIONS.get(name, name)


from loom.workers.operator_routes import verdict as _verdict  # noqa: E402  (imports this module)

ROUTES.append(("POST", ("executions", "*", "verdict"), _verdict))

from loom.workers.retry_route import retry as _retry  # noqa: E402  (it imports this module)

ROUTES.append(("POST", ("executions", "*", "retry"), _retry))

from loom.workers.cancel_route import cancel as _cancel  # noqa: E402  (it imports this module)

ROUTES.append(("POST", ("executions", "*", "cancel"), _cancel))

from loom.workers.fork_route import fork as _fork  # noqa: E402  (it imports this module)

ROUTES.append(("POST", ("executions", "*", "fork"), _fork))

from loom.workers import deadletters_route as _dead  # noqa: E402  (it imports this module)

ROUTES.append(("GET", ("dead-letters",), _dead.list_dead_letters))
ROUTES.append(("POST", ("dead-letters", "retry"), _dead.redrive_dead_letters))
_ACTIONS.update(list_dead_letters="list", redrive_dead_letters="retry")
BODY_SCOPED.add(_dead.redrive_dead_letters)

from loom.workers.schedule_routes import list_schedules as _schedules  # noqa: E402

ROUTES.append(("GET", ("schedules",), _schedules))
_ACTIONS.update(list_schedules="list")

from loom.workers.queue_routes import list_queues as _queues  # noqa: E402

ROUTES.append(("GET", ("queues",), _queues))
_ACTIONS.update(list_queues="list")
from loom.workers.http_messages import get_event as _get_event  # noqa: E402
from loom.workers.http_messages import send_message as _send_message  # noqa: E402

ROUTES.append(("POST", ("executions", "*", "messages"), _send_message))
ROUTES.append(("GET", ("executions", "*", "events", "*"), _get_event))
_ACTIONS.update(send_message="resume", get_event="read")

from loom.workers import stream_routes as _streams  # noqa: E402
from loom.workers import update_routes as _updates  # noqa: E402

ROUTES.append(("POST", ("executions", "*", "updates"), _updates.send_update))
ROUTES.append(("GET", ("executions", "*", "updates", "*"), _updates.get_update))
ROUTES.append(("POST", ("executions", "*", "query"), _updates.query))
ROUTES.append(("GET", ("executions", "*", "streams", "*"), _streams.read_stream))
_ACTIONS.update(send_update="resume", get_update="read", query="read", read_stream="read")
