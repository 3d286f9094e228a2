"""The routes of the HTTP worker, mounted: each resource's module, one table.

The routes themselves live one module per resource (:mod:`loom.workers.core_routes` for
execute, start and resume; the operator routes, messages, versions, schedules, queues...);
what they share is :mod:`loom.workers.http_base`, re-exported here for the server.
"""

from __future__ import annotations

from loom.workers import bulk_routes as _bulk
from loom.workers import deadletters_route as _dead
from loom.workers.cancel_route import cancel as _cancel
from loom.workers.core_routes import execute, resume, start
from loom.workers.fork_route import fork as _fork
from loom.workers.history_route import get_execution as _get_execution
from loom.workers.http_base import (
    CALLER,
    HttpError,
    Reply,
    Route,
    Services,
    authorize,
    bind_result,
    caller,
    check_caller,
    match,
    parse_json,
    parse_model,
    path_segments,
    read_body,
    run,
)
from loom.workers.http_messages import get_event as _get_event
from loom.workers.http_messages import send_message as _send_message
from loom.workers.http_versions import list_versions
from loom.workers.operator_routes import verdict as _verdict
from loom.workers.queue_routes import list_queues as _queues
from loom.workers.retry_route import retry as _retry
from loom.workers.schedule_admin_routes import ROUTES as _SCHEDULE_ROUTES
from loom.workers.schedule_routes import list_schedules as _schedules
from loom.workers.stream_routes import read_stream as _read_stream
from loom.workers.update_routes import get_update as _get_update
from loom.workers.update_routes import query as _query
from loom.workers.update_routes import send_update as _send_update

__all__ = [
    "BODY_SCOPED",
    "CALLER",
    "ROUTES",
    "HttpError",
    "Reply",
    "Route",
    "Services",
    "authorize",
    "bind_result",
    "caller",
    "check_caller",
    "match",
    "parse_json",
    "parse_model",
    "path_segments",
    "read_body",
    "route_action",
    "run",
]

BODY_SCOPED: set[Route] = {
    execute,
    start,
    _dead.redrive_dead_letters,
    _bulk.bulk_cancel,
    _bulk.bulk_resume,
    _bulk.bulk_retry,
    *(route for _, _, route in _SCHEDULE_ROUTES),  # (they act on no execution)
}
"""Routes whose execution is named in the body, not the path: the server leaves their
caller check to them (:func:`check_caller`, after the body is parsed). By identity, not
name, so no other route can skip the check by sharing a name."""

# (method, path pattern with "*" for a parameter, function)
ROUTES: list[tuple[str, tuple[str, ...], Route]] = [
    ("POST", ("execute",), execute),
    ("POST", ("executions",), start),
    ("POST", ("executions", "*", "resume"), resume),
    ("GET", ("versions",), list_versions),
    ("GET", ("executions", "*"), _get_execution),
    ("POST", ("executions", "*", "verdict"), _verdict),
    ("POST", ("executions", "*", "retry"), _retry),
    ("POST", ("executions", "*", "cancel"), _cancel),
    ("POST", ("executions", "*", "fork"), _fork),
    ("GET", ("dead-letters",), _dead.list_dead_letters),
    ("POST", ("dead-letters", "retry"), _dead.redrive_dead_letters),
    ("GET", ("schedules",), _schedules),
    *_SCHEDULE_ROUTES,
    ("GET", ("queues",), _queues),
    ("POST", ("executions", "*", "messages"), _send_message),
    ("GET", ("executions", "*", "events", "*"), _get_event),
    ("POST", ("bulk", "cancel"), _bulk.bulk_cancel),
    ("POST", ("bulk", "resume"), _bulk.bulk_resume),
    ("POST", ("bulk", "retry"), _bulk.bulk_retry),
    ("POST", ("executions", "*", "updates"), _send_update),
    ("GET", ("executions", "*", "updates", "*"), _get_update),
    ("POST", ("executions", "*", "query"), _query),
    ("GET", ("executions", "*", "streams", "*"), _read_stream),
]

# What the caller check is told a route does, where its name does not say it.
_ACTIONS = {
    "get_execution": "read",
    "list_executions": "list",
    "list_versions": "list",
    "list_dead_letters": "list",
    "redrive_dead_letters": "retry",
    "list_schedules": "list",
    "list_queues": "list",
    "send_message": "resume",
    "get_event": "read",
    **_bulk.ACTIONS,
    "send_update": "resume",
    "get_update": "read",
    "query": "read",
    "read_stream": "read",
}


def route_action(route: Route) -> str:
    """What the caller check is told a route does: ``start``, ``read``, ``cancel``..."""
    name = getattr(route, "__name__", "call")
    return _ACTIONS.get(name, name)
