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
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from flask import Flask, Request, Response, request
from werkzeug.exceptions import HTTPException

from loom.config import load_app, open_blob_store, open_store, refuse_inprocess_on_cloud_run
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import (
    ConfigurationError,
    LoomError,
    StoreError,
    StoreUnavailableError,
)
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
    require_authenticator_off_loopback,
    resume_auth_from_env,
    verdict_auth_from_env,
)
from loom.workers.base import WorkerRuntime
from loom.workers.health import liveness, readiness
from loom.workers.http_errors import (
    access_log,
    error_reply,
    http_exception_reply,
    json_response,
)
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
from loom.workers.logs import configure_logging, log_context, trace_fields
from loom.workers.loop import PROCESS_LOOP
from loom.workers.schedule_routes import fire_schedules_forever

log = logging.getLogger("loom.worker")

DEFAULT_MAX_BODY = 1024 * 1024
_OPEN_PATHS = (["health"], ["live"], ["openapi.json"])
# Every method reaches the handler, which answers 405 naming what the path allows (Allow):
# a method left out here got the framework's 405, without an Allow header.
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]


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


def create_wsgi_app(handler: WorkerHandler) -> Flask:
    """A Flask app that sends every path and method to ``handler`` (for ``loom serve``)."""
    app = Flask("loom_worker")
    app.register_error_handler(HTTPException, http_exception_reply)

    def view(path: str = "") -> Response:
        return handler(request._get_current_object())  # type: ignore[attr-defined]

    for rule in ("/", "/<path:path>"):
        app.add_url_rule(
            rule,
            "worker",
            view,
            methods=_METHODS,
            provide_automatic_options=False,
            strict_slashes=False,
        )
    return app


def _embedded_runtime(app_ref: str | None, store_url: str | None) -> Runtime:
    """``loom serve``'s runtime: the worker's, plus an in-process dispatcher on the
    process loop, so durable timers fire in this process when they fall due."""
    refuse_inprocess_on_cloud_run()
    runtime = build_runtime(app_ref, store_url)
    runtime.dispatcher = InProcessDispatcher(LocalWorkerRuntime(runtime))
    return runtime


async def _catch_up(handler: WorkerHandler) -> int:
    while True:
        try:
            runtime = handler.services().runtime
            break
        except StoreError:
            await asyncio.sleep(1.0)  # the store cannot be opened yet
    dispatcher = runtime.dispatcher
    assert isinstance(dispatcher, InProcessDispatcher)
    return await dispatcher.recover(runtime.store)


def _recovered(done: Future[int]) -> None:
    exc = None if done.cancelled() else done.exception()
    if exc is not None:
        log.error("catching up on the backlog failed: %s", exc, exc_info=exc)
    elif not done.cancelled():
        log.info("caught up on the backlog: %d executions re-dispatched", done.result())


def serve_forever(
    app_ref: str | None, store_url: str | None, host: str = "127.0.0.1", port: int = 8080
) -> None:
    """Serve the worker on ``host:port`` until interrupted (``loom serve``).

    The store defaults to the embedded SQLite file, so a ``loom start`` in another terminal
    and this server share executions. A non-loopback ``host`` needs ``LOOM_CALLER_AUTH``.
    """
    try:
        require_authenticator_off_loopback(host)
    except ConfigurationError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    from werkzeug.serving import WSGIRequestHandler, make_server

    class _Quiet(WSGIRequestHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            return None  # the worker writes its own JSON access line

    configure_logging()
    handler = WorkerHandler(lambda: _embedded_runtime(app_ref, store_url))
    try:
        handler.services()  # a bad app or store URL fails now, not later
    except StoreError as exc:
        # The store may come back (a full disk, a read-only mount): serve, and say so.
        print(f"warning: {exc.message}; /health answers 503 until it works", file=sys.stderr)
    except LoomError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    server = make_server(
        host, port, create_wsgi_app(handler), threaded=True, request_handler=_Quiet
    )
    # Listening first: the backlog (executions left running, timers armed before this
    # process started or by `loom start`) is caught up in the background.
    PROCESS_LOOP.submit(_catch_up(handler)).add_done_callback(_recovered)
    PROCESS_LOOP.submit(fire_schedules_forever(lambda: handler.services().runtime))
    print(
        f"loom worker listening on http://{host}:{server.port} "
        f"(store {store_url or os.environ.get('LOOM_STORE') or 'default'}); "
        f"console at http://{host}:{server.port}/console",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
