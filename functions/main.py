"""functions-framework targets: one per Cloud Run service.

Run one locally::

    LOOM_APP=examples.orders:app LOOM_STORE=sqlite:///.loom/loom.db \
        functions-framework --source functions/main.py --target worker --port 8080

Each target is a few lines over the engine; the logic lives in ``loom.workers``.
"""

from __future__ import annotations

from typing import cast

import flask
import functions_framework
from werkzeug.exceptions import HTTPException

from loom.errors import StoreError
from loom.runtime import Runtime
from loom.workers.admission import slots_from_env
from loom.workers.body_limit import body_limit, guard_declared_length
from loom.workers.events_target import CloudEventLike, EventsHandler
from loom.workers.http_errors import http_exception_reply, store_error_response
from loom.workers.logs import configure_logging
from loom.workers.server import WorkerHandler
from loom.workers.tasks_target import TasksHandler

configure_logging()
# Errors raised by the framework's own routing answer the same JSON error body as ours.
functions_framework.errorhandler(HTTPException)(http_exception_reply)
# A store failure the CloudEvent target raises (to be redelivered) is a 503, not a 500.
functions_framework.errorhandler(StoreError)(store_error_response)
if flask.has_app_context():  # loaded by functions-framework, inside the target's app
    _app = cast(flask.Flask, flask.current_app._get_current_object())  # type: ignore[attr-defined]
    guard_declared_length(_app, body_limit(_app.name))


def _runtime() -> Runtime:
    """Every target's runtime, composed from the environment on first use (LOOM_APP,
    LOOM_STORE, LOOM_BLOBS, LOOM_DISPATCH…: see ``loom_gcp.bootstrap``)."""
    from loom_gcp.bootstrap import build_runtime

    return build_runtime()


# gunicorn's THREADS, minus the threads kept for /health and /live (loom.workers.admission).
_worker = WorkerHandler(_runtime, slots=slots_from_env())
_tasks = TasksHandler(_runtime, slots=slots_from_env())
_events = EventsHandler(_runtime)


@functions_framework.http
def worker(request: flask.Request) -> flask.Response:
    """The HTTP worker: /health, /execute, /executions… (``LOOM_APP``, ``LOOM_STORE``)."""
    return _worker(request)


@functions_framework.http
def tasks(request: flask.Request) -> flask.Response:
    """Cloud Tasks: POST /tasks/execute (a dispatch), POST /tasks/sweep (Cloud Scheduler)."""
    return _tasks(request)


@functions_framework.cloud_event
def events(event: CloudEventLike) -> None:
    """Pub/Sub or Eventarc: a message that starts or resumes an execution."""
    _events(event)
