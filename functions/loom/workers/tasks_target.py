"""The Cloud Tasks target: ``POST /tasks/{execute,sweep,purge,schedules,job}``.

:class:`TasksHandler` routes each request and turns what it raised into the answer Cloud
Tasks acts on. ``/tasks/execute`` takes what
:class:`~loom_gcp.cloud_tasks.CloudTasksDispatcher` enqueued and answers so that Cloud Tasks
does the right thing next (:mod:`loom.workers.tasks_execute`: 2xx when there is nothing to
redo, a follow-up task while another holder's claim is live, 503 with ``Retry-After`` when
the store failed, 5xx for anything unexpected, 4xx only for a body that is not a task).

``/tasks/sweep`` and ``/tasks/purge`` (for Cloud Scheduler) live in
:mod:`loom.workers.tasks_maintenance`; ``/tasks/job`` runs a job the dispatcher carried
(:mod:`loom.kernel.jobs`: an admit pass, one shard's purge, sweep or schedules).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from flask import Request, Response

from loom.errors import InputError, LoomError, StoreError
from loom.kernel.jobs import Job, carries_jobs, run_job
from loom.runtime import Runtime
from loom.telemetry import incoming
from loom.workers.admission import PROBE_PATHS, Slots, busy_reply
from loom.workers.auth import Authenticator, AuthError
from loom.workers.guard import CallerGuard
from loom.workers.health import liveness, readiness, store_error_reply
from loom.workers.http_base import HttpError, parse_json, parse_model, read_body
from loom.workers.lazy import LazyRuntime
from loom.workers.logs import bind, log_context, trace_fields
from loom.workers.loop import PROCESS_LOOP, BackgroundLoop
from loom.workers.schedule_routes import schedule_tick
from loom.workers.tasks_execute import Reply, TaskBody, TaskInfo, execute_task, outcome
from loom.workers.tasks_maintenance import (
    DEFAULT_SWEEP_GRACE,
    purge,
    purge_route,
    start_sweep,
    sweep,
)

log = logging.getLogger("loom.tasks")


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


__all__ = [
    "Reply",
    "TaskBody",
    "TaskInfo",
    "TasksHandler",
    "error_reply",
    "execute_task",
    "outcome",
    "purge",
    "sweep",
]
