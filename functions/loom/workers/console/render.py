"""Templates to HTML responses: Jinja2 with every value escaped, and headers that forbid the
page from running anything but the console's own script.

Autoescaping is on for every template, so whatever an execution recorded (ids, flow names,
payloads, error messages, who gave a verdict) is shown as text, never as markup; the
Content-Security-Policy allows no inline script or style, so even markup that slipped
through could not run.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from flask import Response
from jinja2 import Environment, PackageLoader, StrictUndefined

from loom.workers.console.fmt import fmt_duration, fmt_time, fmt_until, when

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@cache
def environment() -> Environment:
    """The console's template environment (built once per process)."""
    env = Environment(
        loader=PackageLoader("loom.workers.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ts"] = fmt_time
    env.filters["dur"] = fmt_duration
    env.filters["until"] = fmt_until
    env.filters["when"] = when
    return env


def _harden(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cache-Control"] = "no-store"
    return response


def page(template: str, context: dict[str, Any], status: int = 200) -> Response:
    """A rendered page."""
    html = environment().get_template(template).render(**context)
    return _harden(Response(html, status=status, mimetype="text/html"))


def plain(text: str, mimetype: str = "text/plain") -> Response:
    """A text answer (a recorded value fetched on demand), never sniffed as HTML."""
    return _harden(Response(text, mimetype=mimetype))


def as_json(value: Any) -> Response:
    """A small JSON answer (what a page polls to know it is stale)."""
    return _harden(Response(json.dumps(value), mimetype="application/json"))
