"""Templates to HTML responses: Jinja2 with every value escaped, and headers that forbid the
page from running anything but the console's own script.

Autoescaping is on for every template, so whatever an execution recorded (ids, flow names,
payloads, error messages, who gave a verdict) is shown as text, never as markup; the
Content-Security-Policy allows no inline script or style, so even markup that slipped
through could not run.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from functools import cache
from typing import Any

from flask import Response
from jinja2 import Environment, PackageLoader, StrictUndefined

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def fmt_time(value: float | None) -> str:
    """Epoch seconds as ``2026-01-31 14:00:05.123Z`` ("" for none)."""
    if value is None or not math.isfinite(value):
        return ""
    moment = datetime.fromtimestamp(value, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def fmt_duration(seconds: float | None) -> str:
    """A duration an operator reads at a glance: ``850 ms``, ``3.2 s``, ``4 min 10 s``."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{seconds / 3600:.1f} h"


def fmt_until(value: float | None) -> str:
    """How far ahead (or behind) a wake time is: ``in 5.0 s`` / ``12 ms ago``."""
    if value is None:
        return ""
    delta = value - time.time()
    return f"in {fmt_duration(delta)}" if delta >= 0 else f"{fmt_duration(-delta)} ago"


@cache
def environment() -> Environment:
    """The console's template environment (built once per process)."""
    env = Environment(
        loader=PackageLoader("loom.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ts"] = fmt_time
    env.filters["dur"] = fmt_duration
    env.filters["until"] = fmt_until
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


def plain(text: str) -> Response:
    """A text answer (a recorded value fetched on demand), never sniffed as HTML."""
    return _harden(Response(text, mimetype="text/plain"))
