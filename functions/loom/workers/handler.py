"""The HTTP worker (ADR 0002): one routing function over ``flask.Request``.

:class:`WorkerHandler` is what the functions-framework ``worker`` target in
``functions/main.py`` calls and what ``loom serve`` mounts on a local HTTP server. Per
request it routes, runs the runtime call on the process's shared event loop
(:mod:`loom.workers.loop`), and answers JSON: the result, or ``{"code", "message",
"details"}`` with the status the error calls for. Bad input is never a 500; an
internal error answers 500 with an ``error_id`` that is also in the log line carrying the
traceback.

Paths under ``/console`` are the operator's web console (:mod:`loom.workers.console`): HTML pages
behind the same checks.

The worker keeps no execution state between requests: the runtime (app + store) is built
once per process by :func:`build_runtime` and every call rebuilds the execution from the
store.

:mod:`loom.workers.server` serves this handler: the WSGI app and ``loom serve``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from flask import Request, Response

from loom.config import load_app, open_blob_store, open_store
from loom.errors import ConfigurationError, StoreUnavailableError
from loom.grants import GrantPolicy
from loom.runtime import Runtime
from loom.telemetry import incoming
from loom.workers import console
from loom.workers.admission import PROBE_PATHS, Slots, busy_reply
from loom.workers.auth import (
    Authenticator,
    caller_auth_from_env,
    loopback_host,
    loopback_mode,
    resume_auth_from_env,
    verdict_auth_from_env,
)
from loom.workers.base import WorkerRuntime
from loom.workers.health import liveness, readiness
from loom.workers.http_errors import access_log, error_reply, json_response
from loom.workers.http_routes import (
    BODY_SCOPED,
    ROUTES,
    HttpError,
    Reply,
    Route,
    Services,
    check_caller,
    match,
    path_segments,
    route_action,
)
from loom.workers.local import LocalWorkerRuntime
from loom.workers.logs import log_context, trace_fields
from loom.workers.loop import PROCESS_LOOP

DEFAULT_MAX_BODY = 1024 * 1024
_OPEN_PATHS = (["health"], ["live"], ["openapi.json"])


def build_runtime(app_ref: str | None = None, store_url: str | None = None) -> Runtime:
    """The runtime the worker serves: the one place the worker's backends are chosen.

    The app comes from ``app_ref`` or ``LOOM_APP``, the store from ``store_url`` or
    ``LOOM_STORE``, blobs from ``LOOM_BLOBS`` (for a SQLite store: a ``blobs`` directory
    beside the database, as the CLI does, so ``loom serve`` and ``loom start`` share them).
    With no dispatcher, control calls (start, resume, verdict) run the execution inline
    until it blocks; a dispatcher chosen from the environment (Cloud Tasks) goes here.

    Raises:
        ConfigurationError: A bad app reference or store URL.
    """
    app = load_app(app_ref)
    store = open_store(store_url)
    blobs = open_blob_store(store_url=store_url)
    return Runtime(app, store, dispatcher=None, blobs=blobs)


def _max_body_from_env() -> int:
    raw = os.environ.get("LOOM_MAX_BODY_BYTES")
    if not raw:
        return DEFAULT_MAX_BODY
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigurationError(f"LOOM_MAX_BODY_BYTES must be a positive integer, not {raw!r}")
    return int(raw)


class WorkerHandler:
    """The HTTP worker's routing function: ``handler(flask_request) -> flask.Response``.

    Everything is built on first use (so importing ``functions/main.py`` never fails, and
    a broken configuration shows as an unhealthy ``/health``) and then shared by every
    request of the process: loading the app and opening the store is a cold start's cost,
    not a request's. What is shared holds no execution state; each call rebuilds from the
    store.

    Args:
        runtime: A runtime, or a factory for one (default :func:`build_runtime`).
        worker: The worker runtime ``POST /execute`` uses, or a factory taking the runtime
            (default ``LocalWorkerRuntime(runtime)``).
        resume_auth: Checks resumes (default from the environment, see
            :mod:`loom.workers.auth`).
        verdict_auth: Checks verdicts (default from the environment).
        max_body_bytes: The request body limit (default ``LOOM_MAX_BODY_BYTES`` or 1 MiB).
        caller_auth: Checks the caller of every route but ``/health``, ``/live`` and ``/openapi.json``
            (default ``LOOM_CALLER_AUTH``; none if unset).
        grants: The grant policy (default ``LOOM_GRANTS``/``LOOM_GRANTS_FILE`` if set,
            else the runtime's own).
        slots: How many requests other than the probes may run at once (default: no
            bound; functions-framework's targets pass ``THREADS`` minus the probes' reserve,
            see :mod:`loom.workers.admission`).
    """

    def __init__(
        self,
        runtime: Runtime | Callable[[], Runtime] = build_runtime,
        *,
        worker: WorkerRuntime | Callable[[Runtime], WorkerRuntime] | None = None,
        resume_auth: Authenticator | None = None,
        verdict_auth: Authenticator | None = None,
        max_body_bytes: int | None = None,
        caller_auth: Authenticator | None = None,
        grants: GrantPolicy | None = None,
        slots: Slots | None = None,
    ) -> None:
        self._runtime = runtime
        self._slots = slots
        self._caller_auth = caller_auth
        self._grants = grants
        self._worker = worker
        self._resume_auth = resume_auth
        self._verdict_auth = verdict_auth
        self._max_body = max_body_bytes
        self._services: Services | None = None
        self._lock = threading.Lock()

    def services(self) -> Services:
        """The runtime, worker and checks, built on the first call.

        Raises:
            ConfigurationError: The environment names a bad app, store or authenticator.
        """
        if self._services is None:
            with self._lock:
                if self._services is None:
                    self._services = self._build()
        return self._services

    def _build(self) -> Services:
        runtime = self._runtime if isinstance(self._runtime, Runtime) else self._runtime()
        runtime.store.serve_off_loop()  # a slow store must not stall unrelated requests
        grants = self._grants or GrantPolicy.from_env()
        if grants is not None:
            runtime.grants = grants
        worker = self._worker
        if worker is None:
            worker = LocalWorkerRuntime(runtime)
        elif not isinstance(worker, WorkerRuntime):
            worker = worker(runtime)
        return Services(
            runtime=runtime,
            worker=worker,
            resume_auth=self._resume_auth or resume_auth_from_env(),
            verdict_auth=self._verdict_auth or verdict_auth_from_env(),
            max_body=self._max_body or _max_body_from_env(),
            caller_auth=self._caller_auth or caller_auth_from_env(),
            waiters=self._slots.half() if self._slots is not None else None,
        )

    def __call__(self, req: Request) -> Response:
        """Answer one request (see the module docstring)."""
        slots = self._slots
        if slots is None or req.path in PROBE_PATHS:
            return self._answer(req)
        if not slots.try_enter():  # every other thread waits on something: keep them for probes
            return json_response(*busy_reply(slots))
        try:
            return self._answer(req)
        finally:
            slots.leave()

    def _answer(self, req: Request) -> Response:
        started = time.perf_counter()
        with log_context(**trace_fields(req.headers)), incoming(req.headers):
            refused = self._foreign_host(req)
            if refused is not None:
                access_log(req, refused.status, time.perf_counter() - started)
                return json_response(refused.status, refused.to_json(), {})
            if console.is_console_path(req.path):  # HTML pages, behind the same checks
                page = console.serve(self.services, req)
                access_log(req, page.status_code, time.perf_counter() - started)
                return page
            try:
                status, body = self._route(req)
                headers: dict[str, str] = {}
            except Exception as exc:  # every error, expected or not, becomes a JSON answer
                status, body, headers = error_reply(exc)
            access_log(req, status, time.perf_counter() - started)
        return json_response(status, body, headers)

    def _ready_runtime(self) -> Runtime:
        """The runtime for ``/health``: never waits for another thread building it (a store
        that hangs while it opens must not hang the probe).

        Raises:
            StoreUnavailableError: The services are being built right now.
        """
        if self._services is None and self._lock.locked():
            raise StoreUnavailableError(
                "the worker is starting (its app and store are being opened)",
                details={"reason": "starting"},
            )
        return self.services().runtime

    def _foreign_host(self, req: Request) -> HttpError | None:
        """The refusal of a request naming another host to a loopback-only worker (no
        caller check, off Cloud Run): a browser page of another site whose name resolves to
        127.0.0.1 (DNS rebinding) reaches no route. The probes and the OpenAPI document,
        which reveal nothing, answer whatever the ``Host`` (an orchestrator probes by IP);
        the console's pages apply the same rule themselves (``loom.workers.console.security``)."""
        if self._caller_auth is not None or not loopback_mode():
            return None
        if path_segments(req) in _OPEN_PATHS or loopback_host(req.host):
            return None
        if console.is_console_path(req.path):
            return None  # the console refuses it itself, with a page (its reader rule)
        return HttpError(
            403,
            "foreign_host",
            "this worker answers requests to localhost only (no caller check is configured): "
            "open it as http://127.0.0.1:<port>, or set LOOM_CALLER_AUTH",
            {"host": req.host[:200]},
        )

    def _route(self, req: Request) -> Reply:
        segments = path_segments(req)
        method = "GET" if req.method == "HEAD" else req.method
        if segments == ["health"]:
            _require_get(method)
            return readiness(self._ready_runtime, PROCESS_LOOP)
        if segments == ["live"]:
            _require_get(method)
            return liveness()
        if segments == ["openapi.json"]:
            from loom.workers.openapi import document

            _require_get(method)
            return 200, document()
        allowed: list[str] = []
        for route_method, pattern, route in ROUTES:
            args = match(pattern, segments)
            if args is None:
                continue
            if route_method == method:
                services = self.services()
                _check_caller(services, req, route, args)
                return route(services, req, args)
            allowed.append(route_method)
        if allowed:
            raise _not_allowed(req.method, allowed)
        raise HttpError(404, "not_found", f"no route {req.method} {req.path}")


def _check_caller(services: Services, req: Request, route: Route, args: list[str]) -> None:
    """Run the caller check (when configured) before the route reads or writes anything;
    a route that names its execution in the body runs it itself once the body is parsed."""
    if route in BODY_SCOPED:
        return
    check_caller(services, req, route_action(route), args[0] if args else "")


def _require_get(method: str) -> None:
    if method != "GET":
        raise _not_allowed(method, ["GET"])


def _not_allowed(method: str, allowed: list[str]) -> HttpError:
    return HttpError(
        405,
        "method_not_allowed",
        f"{method} is not allowed here",
        {"allowed": allowed},
        {"Allow": ", ".join(allowed)},
    )
