"""The operator's web console, served by the worker under ``/console``.

Server-rendered pages (Jinja2, one small script of our own, no build step): the executions
list with status counts and filters, an execution's timeline, and the in-doubt queue with
its verdict forms. It reads through the store's paged, indexed queries and acts through the
same checks and runtime calls as the HTTP API (see :mod:`loom.workers.console.security`).

This module stays light (the worker imports it on every request to test the path); the
pages and Jinja2 load on the first console request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Request, Response

    from loom.workers.http_base import Services

PREFIX = "/console"


def is_console_path(path: str) -> bool:
    """Whether a request path belongs to the console."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def serve(services: Callable[[], Services], req: Request) -> Response:
    """Answer one console request (see :func:`loom.workers.console.app.serve`)."""
    from loom.workers.console.app import serve as serve_page

    return serve_page(services, req)
