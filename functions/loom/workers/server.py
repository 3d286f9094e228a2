"""Serving the HTTP worker (ADR 0002): the WSGI app, and ``loom serve``.

:func:`create_wsgi_app` sends every path and method to a
:class:`~loom.workers.handler.WorkerHandler` (the routing function the functions-framework
``worker`` target in ``functions/main.py`` calls). :func:`serve_forever` is ``loom serve``:
that app on a local HTTP server, over an embedded runtime whose timers fire in this process,
catching up on the backlog once it listens.

The handler and the runtime it builds live in :mod:`loom.workers.handler`; importing them
from here goes on working.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from concurrent.futures import Future

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from loom.config import refuse_inprocess_on_cloud_run
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ConfigurationError, LoomError, StoreError
from loom.runtime import Runtime
from loom.workers.auth import require_authenticator_off_loopback
from loom.workers.handler import DEFAULT_MAX_BODY, WorkerHandler, build_runtime
from loom.workers.http_errors import http_exception_reply
from loom.workers.local import LocalWorkerRuntime
from loom.workers.logs import configure_logging
from loom.workers.loop import PROCESS_LOOP
from loom.workers.schedule_routes import fire_schedules_forever

__all__ = [
    "DEFAULT_MAX_BODY",
    "WorkerHandler",
    "build_runtime",
    "create_wsgi_app",
    "serve_forever",
]

log = logging.getLogger("loom.worker")

# Every method reaches the handler, which answers 405 naming what the path allows (Allow):
# a method left out here got the framework's 405, without an Allow header.
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]


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
