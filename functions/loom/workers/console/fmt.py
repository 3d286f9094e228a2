"""How the console writes times and durations: UTC to the millisecond, durations at a glance."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

from markupsafe import Markup, escape


def fmt_time(value: float | None) -> str:
    """Epoch seconds as ``2026-01-31 14:00:05.123Z`` ("" for none)."""
    if value is None or not math.isfinite(value):
        return ""
    try:
        moment = datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        # A deadline past year 9999 (a start may ask for a timeout of 1e300 s): it was a
        # 500 for every page listing the execution.
        return f"{value:.6g} (epoch seconds)"
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


def when(value: float | None) -> Markup:
    """A time as ``<time>``: UTC as text, the instant in ``datetime`` for the page's script
    to add the reader's local time beside it ("" for none)."""
    text = fmt_time(value)
    if not text or value is None or "epoch" in text:
        return Markup(escape(text))
    iso = datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds")
    return Markup('<time datetime="{}">{}</time>').format(iso, text)
