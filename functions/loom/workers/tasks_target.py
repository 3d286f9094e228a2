"""The Cloud Tasks target: ``POST /tasks/{execute,sweep,purge,schedules}``.

``/tasks/execute`` takes what :class:`~loom_gcp.cloud_tasks.CloudTasksDispatcher` enqueued,
``{"executionPackage": {...}, "notBefore": epoch-seconds | null}``, and answers so that Cloud
Tasks does the right thing next:

* **2xx** when there is nothing to redo: the execution ran until it blocked, or it was
  already finished, waiting (gate or timer not due) or parked (in doubt, nondeterminism).
  An unknown execution is 2xx as well: no retry can make it exist.
* **2xx** (``outcome: deferred``) while another holder's claim is live, after enqueuing a
  follow-up task due one second after the claim lapses, named ``{cause}:held@{epoch}``:
  if the holder finished by then, that task finds nothing to do, and if it died, its claim
  has expired and the task takes over. Not 429/503: Cloud Tasks answers those by lowering
  the whole queue's dispatch rate, so one busy execution would slow every other one down.
  Only when the follow-up would be this very task (it arrived with the claim still live,
  through clock skew) is the answer 503 with ``Retry-After``.
* **503 with** ``Retry-After`` when the store failed (``code: store_unavailable`` or
  ``store``): nothing was half-done, the log keeps what was durably written.
* **5xx** for anything unexpected: Cloud Tasks retries per the queue's retry config.
  **4xx** only for a body that is not a task at all.

Duplicate and overlapping deliveries are harmless: every ``execute`` first appends a claim
at the end of the log it read, so of two concurrent attempts one is superseded, and a late
duplicate finds nothing to do. The ``X-CloudTasks-*`` headers are read for the logs.

A timer task whose ``notBefore`` is still ahead was delivered early: Cloud Tasks cannot
schedule more than 30 days out, so a longer timer arrives at that horizon and is dispatched
again with the same time (a re-arm). A delivery that finds the execution sleeping has the
runtime dispatch its timer again (deduplicated by name): the attempt that suspended it may
have died before its own timer dispatch.

``/tasks/sweep`` and ``/tasks/purge`` (for Cloud Scheduler) live in
:mod:`loom.workers.tasks_maintenance`; ``/tasks/job`` runs a job the dispatcher carried
(:mod:`loom.kernel.jobs`: an admit pass, one shard's purge, sweep or schedules).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flask import Request, Response
from pydantic import BaseModel, ConfigDict
from werkzeug.datastructures import Headers

from loom.errors import (
    ExecutionSupersededError,
    InputError,
    LoomError,
    StoreError,
    UnknownExecutionError,
)
from loom.kernel.jobs import Job, carries_jobs, run_job
from loom.runtime import Runtime
from loom.telemetry import incoming
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.admission import PROBE_PATHS, Slots, busy_reply
from loom.workers.auth import Authenticator, AuthError
from loom.workers.guard import CallerGuard
from loom.workers.health import liveness, readiness, store_error_reply
from loom.workers.http_base import HttpError, parse_json, parse_model, read_body
from loom.workers.lazy import LazyRuntime
from loom.workers.logs import bind, log_context, trace_fields
from loom.workers.loop import PROCESS_LOOP, BackgroundLoop
from loom.workers.schedule_routes import schedule_tick
from loom.workers.tasks_maintenance import (
    DEFAULT_SWEEP_GRACE,
    purge,
    purge_route,
    require_dispatcher,
    start_sweep,
    sweep,
)

log = logging.getLogger("loom.tasks")

Reply = tuple[int, dict[str, Any], dict[str, str]]
EARLY_WAIT = 2.0  # a task this close to its time waits for it instead of re-arming
MAX_RETRY_AFTER = 3600
HELD_MARK = ":held@"  # dispatch ids of follow-ups of a superseded delivery: {cause}:held@{t}
CLAIM_LAPSE_MARGIN = 1  # seconds after the claim's end, so the follow-up finds it lapsed


class TaskBody(BaseModel):
    """What a task POSTs. Unknown fields are ignored so a newer dispatcher's tasks still
    reach an older worker during a rollout."""

    model_config = ConfigDict(extra="ignore")

    executionPackage: ExecutionPackage  # camelCase: the wire name of ADR 0002
    notBefore: float | None = None


@dataclass(frozen=True)
class TaskInfo:
    """The ``X-CloudTasks-*`` headers of a delivery (all optional: a manual POST has none).

    Attributes:
        queue: The queue's short name.
        task: The task's short name (the hash of the dispatch id).
        retry_count: How many times the task was retried (0 on the first attempt).
        execution_count: How many attempts got a response from the target.
        eta: When the task was scheduled to run (epoch seconds).
    """

    queue: str | None = None
    task: str | None = None
    retry_count: int = 0
    execution_count: int = 0
    eta: float | None = None

    @classmethod
    def from_headers(cls, headers: Headers | Mapping[str, str]) -> TaskInfo:
        """Read the headers Cloud Tasks sets (names are case-insensitive)."""
        lower = {k.lower(): v for k, v in headers.items()}
        return cls(
            queue=lower.get("x-cloudtasks-queuename"),
            task=lower.get("x-cloudtasks-taskname"),
            retry_count=_int(lower.get("x-cloudtasks-taskretrycount")),
            execution_count=_int(lower.get("x-cloudtasks-taskexecutioncount")),
            eta=_float(lower.get("x-cloudtasks-tasketa")),
        )


def _int(raw: str | None) -> int:
    try:
        return int(raw) if raw else 0
    except ValueError:
        return 0


def _float(raw: str | None) -> float | None:
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def outcome(result: ExecutionResult) -> str:
    """``finished``, ``parked``, ``waiting`` or ``running``: why there is nothing to redo."""
    if result.status in ("completed", "failed", "cancelled"):
        return "finished"
    if result.status == "in_doubt" or result.parked_reason is not None:
        return "parked"
    if result.status == "suspended":
        return "waiting"
    return result.status


def _summary(result: ExecutionResult) -> dict[str, Any]:
    return {
        "outcome": outcome(result),
        "execution_id": result.execution_id,
        "status": result.status,
        "last_seq": result.last_seq,
        "wake_at": result.wake_at,
    }


# -- /tasks/execute --------------------------------------------------------------------------


async def execute_task(
    runtime: Runtime,
    body: TaskBody,
    info: TaskInfo,
    *,
    clock: Callable[[], float] = time.time,
) -> Reply:
    """Handle one delivery of a task (see the module docstring)."""
    package = body.executionPackage
    log.info(
        "task %s of %s (%s), retry %d",
        info.task or "-",
        package.dispatch_id or package.execution_id,
        package.reason,
        info.retry_count,
        extra={"execution_id": package.execution_id},
    )
    early = _early_by(body.notBefore, clock())
    if early > EARLY_WAIT:
        return await _rearm(runtime, package, body.notBefore or 0.0)
    if early > 0:
        await asyncio.sleep(early)
    try:
        result = await runtime.execute(package)
    except ExecutionSupersededError as exc:
        return await _superseded(runtime, package, exc, clock)
    except UnknownExecutionError as exc:
        log.warning("task for unknown execution %s dropped", package.execution_id)
        return 200, {"outcome": "unknown_execution", **exc.to_json()}, {}
    bind(status=result.status)
    return 200, _summary(result), {}


def _early_by(not_before: float | None, now: float) -> float:
    return 0.0 if not_before is None else not_before - now


async def _rearm(runtime: Runtime, package: ExecutionPackage, not_before: float) -> Reply:
    """Dispatch a timer that arrived early again, under a new (derived) dispatch id."""
    dispatch_id = f"{package.dispatch_id or package.execution_id}:rearm"
    await require_dispatcher(runtime).dispatch(package, dispatch_id, not_before=not_before)
    return (
        200,
        {"outcome": "rearmed", "execution_id": package.execution_id, "not_before": not_before},
        {},
    )


async def _superseded(
    runtime: Runtime,
    package: ExecutionPackage,
    exc: ExecutionSupersededError,
    clock: Callable[[], float],
) -> Reply:
    """Another holder's claim is live: hand the delivery to a task due when it lapses.

    Answering 2xx (not 429/503) keeps Cloud Tasks from slowing the whole queue down for one
    busy execution. The follow-up task is named after the cause and the claim's end, so every
    delivery superseded by the same claim makes the same task (deduplicated by name), and a
    claim that is extended meanwhile gets a new hop. The follow-up finds nothing to do if the
    holder finished, and takes over if it died.
    """
    now = clock()
    until = now + 1.0
    with contextlib.suppress(UnknownExecutionError):
        claim = (await runtime.load_state(package.execution_id)).claim
        if claim is not None:
            until = max(float(claim["until"]), until)
    until = min(math.ceil(until) + CLAIM_LAPSE_MARGIN, now + MAX_RETRY_AFTER)
    root = (package.dispatch_id or package.execution_id).split(HELD_MARK, 1)[0]
    dispatch_id = f"{root}{HELD_MARK}{until:.0f}"
    if dispatch_id == package.dispatch_id:
        # This very task was due when the claim lapsed and the claim still holds (clock
        # skew): its own name is taken until it ends, so ask Cloud Tasks to come back.
        wait = max(1, math.ceil(until - now))
        return 503, exc.to_json(), {"Retry-After": str(wait)}
    await require_dispatcher(runtime).dispatch(package, dispatch_id, not_before=until)
    log.info(
        "execution %s is held elsewhere; follow-up task due in %.0f s",
        package.execution_id,
        until - now,
        extra={"execution_id": package.execution_id},
    )
    return (
        200,
        {
            "outcome": "deferred",
            "execution_id": package.execution_id,
            "dispatch_id": dispatch_id,
            "not_before": until,
        },
        {},
    )


# -- the HTTP adapter --------------------------------------------------------------------------


class TasksHandler:
    """The ``tasks`` target: routes a flask request to :func:`execute_task` or :func:`sweep`.

    Args:
        runtime: A runtime or a factory for one, built on first use (not at import: a
            forking server must not fork live clients) and shared by every request.
        loop: Where coroutines run (default: the process's :data:`PROCESS_LOOP`).
        max_body_bytes: The request body limit.
        sweep_grace: Seconds; default ``LOOM_SWEEP_GRACE`` or 60.
        slots: How many requests other than the probes may run at once (see
            :mod:`loom.workers.admission`; default: no bound).
        caller_auth: Checks the caller of every route but the probes (default
            ``LOOM_CALLER_AUTH``; on Cloud Run the invoker account's ID token).
    """

    def __init__(
        self,
        runtime: Runtime | Callable[[], Runtime],
        *,
        loop: BackgroundLoop = PROCESS_LOOP,
        max_body_bytes: int = 1024 * 1024,
        sweep_grace: float | None = None,
        slots: Slots | None = None,
        caller_auth: Authenticator | None = None,
    ) -> None:
        self._runtime = LazyRuntime(runtime)
        self._slots = slots
        self._guard = CallerGuard(caller_auth)
        self.loop = loop
        self.max_body = max_body_bytes
        self.sweep_grace = sweep_grace or float(
            os.environ.get("LOOM_SWEEP_GRACE") or DEFAULT_SWEEP_GRACE
        )

    def runtime(self) -> Runtime:
        """The runtime, built on first use."""
        return self._runtime.get()

    def __call__(self, request: Request) -> Response:
        """Answer one request with JSON (errors as ``{"code", "message", "details"}``)."""
        slots = self._slots
        if slots is None or request.path in PROBE_PATHS:
            return self._answer(request)
        if not slots.try_enter():  # keep the last threads for the probes
            status, body, headers = busy_reply(slots)
            return Response(json.dumps(body), status, headers, mimetype="application/json")
        try:
            return self._answer(request)
        finally:
            slots.leave()

    def _answer(self, request: Request) -> Response:
        started = time.perf_counter()
        with log_context(**trace_fields(request.headers)), incoming(request.headers):
            try:
                status, body, headers = self.route(request)
            except Exception as exc:  # every error becomes a JSON answer
                status, body, headers = error_reply(exc)
            log.log(
                logging.ERROR if status >= 500 else logging.INFO,
                "%s %s %d (%.3f s)",
                request.method,
                request.path,
                status,
                time.perf_counter() - started,
            )
        return Response(
            json.dumps(body, default=str),
            status=status,
            headers=headers,
            mimetype="application/json",
        )

    def route(self, request: Request) -> Reply:
        """Dispatch on the path: ``/tasks/execute``, ``/tasks/sweep``, ``/tasks/purge``,
        ``/tasks/schedules``, ``/tasks/job``, ``/health``."""
        segments = [p for p in request.path.split("/") if p]
        if segments not in (["health"], ["live"]):
            self._guard.check(request, segments[-1] if segments[:1] == ["tasks"] else "call")
        if segments == ["tasks", "execute"]:
            _only(request, "POST")
            return self.execute(request)
        if segments == ["tasks", "sweep"]:
            _only(request, "POST")
            return 200, self.loop.run(self._sweep()), {}
        if segments == ["tasks", "purge"]:
            _only(request, "POST")
            return 200, self.loop.run(purge_route(self.runtime())), {}
        if segments == ["tasks", "schedules"]:  # Cloud Scheduler's tick (loom.primitives.schedules)
            _only(request, "POST")
            return 200, self.loop.run(schedule_tick(self.runtime())), {}
        if segments == ["tasks", "job"]:  # a job the dispatcher carried (loom.kernel.jobs)
            _only(request, "POST")
            return self.job(request)
        if segments == ["health"]:
            return self.health()
        if segments == ["live"]:
            return (*liveness(), {})
        raise HttpError(404, "not_found", f"no route {request.method} {request.path}")

    async def _sweep(self) -> dict[str, Any]:
        """The sweep, fanned out into a job per shard where jobs travel."""
        runtime = self.runtime()
        if carries_jobs(runtime):
            return await start_sweep(runtime, grace=self.sweep_grace)
        return await sweep(runtime, grace=self.sweep_grace)

    def health(self) -> Reply:
        """``GET /health``: 503 when the runtime cannot be built (a bad ``LOOM_*`` setting)
        or the store does not answer a cheap check in time."""
        return (*readiness(self.runtime, self.loop), {})

    def job(self, request: Request) -> Reply:
        """``POST /tasks/job``: run the job in the body (``{"job": {...}}``) here.

        A body that is no job is a 400 (no retry can fix it); a store failure a 503 with
        ``Retry-After`` (the job is retried, and every job tolerates a repeat).
        """
        body = parse_json(request, read_body(request, self.max_body))
        try:
            job = Job.from_json(body.get("job"))
        except InputError as exc:
            raise HttpError(400, "invalid_job", exc.message, exc.details) from exc
        bind(job=job.job_id)
        done = self.loop.run(run_job(self.runtime(), job))
        return 200, {"job": job.job_id, **done}, {}

    def execute(self, request: Request) -> Reply:
        """``POST /tasks/execute``."""
        body = parse_model(TaskBody, parse_json(request, read_body(request, self.max_body)))
        bind(execution_id=body.executionPackage.execution_id)
        info = TaskInfo.from_headers(request.headers)
        return self.loop.run(execute_task(self.runtime(), body, info))


def _only(request: Request, method: str) -> None:
    if request.method != method:
        raise HttpError(
            405,
            "method_not_allowed",
            f"{request.method} is not allowed here",
            {"allowed": [method]},
            {"Allow": method},
        )


def error_reply(exc: Exception) -> Reply:
    """The status, JSON error body and headers for an error raised while handling a task."""
    if isinstance(exc, HttpError):  # the request is not a task: 4xx
        return exc.status, exc.to_json(), exc.headers
    if isinstance(exc, AuthError):  # the caller check refused: 401/403, nothing done
        return exc.status, {"code": exc.code, "message": exc.message, "details": {}}, {}
    if isinstance(exc, StoreError):  # Cloud Tasks honours Retry-After on 503
        return store_error_reply(exc)
    # Anything else is worth a retry, even a Loom input error: a flow this revision does
    # not know may be known to the next one during a rollout.
    error_id = uuid.uuid4().hex
    bind(error_id=error_id)
    log.error("internal error %s: %s: %s", error_id, type(exc).__name__, exc, exc_info=exc)
    if isinstance(exc, LoomError):
        body = {"code": exc.code, "message": exc.message, "details": {"error_id": error_id}}
    else:
        body = {
            "code": "internal",
            "message": "internal error; see the log entry with this error_id",
            "details": {"error_id": error_id},
        }
    return 500, body, {}


__all__ = ["TaskBody", "TaskInfo", "TasksHandler", "error_reply", "execute_task", "purge", "sweep"]
