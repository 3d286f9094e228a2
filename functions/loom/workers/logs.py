"""Structured logs in the Cloud Logging format: one JSON object per line on stderr.

Cloud Run turns each JSON line into a log entry: ``severity`` and ``message`` become the
entry's severity and text, ``logging.googleapis.com/trace`` ties the entry to the request's
trace, and every other key lands in ``jsonPayload`` (``execution_id``, ``step_id``,
``error_id``…). Locally the same lines are easy to ``grep`` and ``jq``.

The worker sets the request's trace and execution id in context variables
(:func:`log_context`); ``asyncio.run`` copies the context into the flow's tasks, so a line
logged anywhere below a request carries them without being passed around.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Generator, Mapping
from datetime import UTC, datetime
from typing import Any

from werkzeug.datastructures import Headers

TRACE_KEY = "logging.googleapis.com/trace"
SPAN_KEY = "logging.googleapis.com/spanId"
SAMPLED_KEY = "logging.googleapis.com/trace_sampled"

# Fields a log call may pass with ``extra=`` that the formatter copies into the entry.
_FIELDS = ("execution_id", "step_id", "error_id", "flow", "status", "principal", "httpRequest")

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "loom_log_context", default=None
)

_CLOUD_TRACE = re.compile(r"^([0-9a-fA-F]{32})(?:/(\d+))?(?:;o=([01]))?")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def trace_fields(
    headers: Headers | Mapping[str, str], project: str | None = None
) -> dict[str, Any]:
    """The trace fields of a log entry from the request headers.

    Reads ``X-Cloud-Trace-Context: TRACE/SPAN;o=1`` (what Cloud Run sends) or, failing that,
    W3C ``traceparent``. The trace is ``projects/PROJECT/traces/TRACE`` when the project is
    known (``GOOGLE_CLOUD_PROJECT``), which is the form Cloud Logging links to its trace;
    otherwise the bare trace id.

    Args:
        headers: The request headers (case-insensitive mapping).
        project: The Google Cloud project; default from the environment.

    Returns:
        ``{}`` when the request carries no trace.
    """
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("GCP_PROJECT")
    trace = span = sampled = None
    match = _CLOUD_TRACE.match(headers.get("X-Cloud-Trace-Context", ""))
    if match:
        trace, span, sampled = match.group(1).lower(), match.group(2), match.group(3) == "1"
    else:
        match = _TRACEPARENT.match(headers.get("traceparent", "").strip().lower())
        if match:
            trace, span = match.group(1), match.group(2)
            sampled = int(match.group(3), 16) & 1 == 1
    if trace is None:
        return {}
    fields: dict[str, Any] = {TRACE_KEY: f"projects/{project}/traces/{trace}" if project else trace}
    if span:
        fields[SPAN_KEY] = span
    if sampled is not None:
        fields[SAMPLED_KEY] = sampled
    return fields


@contextlib.contextmanager
def log_context(**fields: Any) -> Generator[None, None, None]:
    """Add ``fields`` to every entry logged inside the block (this thread, its tasks)."""
    merged = {**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


def bind(**fields: Any) -> None:
    """Add ``fields`` to the current log context (inside a :func:`log_context` block)."""
    current = _context.get()
    if current is not None:
        current.update({k: v for k, v in fields.items() if v is not None})


class CloudLoggingFormatter(logging.Formatter):
    """Formats a record as one Cloud Logging JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": _severity(record.levelno),
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logger": record.name,
        }
        entry.update(_context.get() or {})
        for name in _FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            # Error Reporting groups entries whose stack_trace holds a Python traceback.
            entry["stack_trace"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(entry, default=str, ensure_ascii=False)


def _severity(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "CRITICAL"
    if levelno >= logging.ERROR:
        return "ERROR"
    if levelno >= logging.WARNING:
        return "WARNING"
    if levelno >= logging.INFO:
        return "INFO"
    return "DEBUG"


class _StderrHandler(logging.StreamHandler[Any]):
    """Writes to whatever ``sys.stderr`` is at the time of the call.

    Test runners swap ``sys.stderr`` per test; a handler bound to the first one would write
    to a closed stream later.
    """

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(level: int = logging.INFO) -> logging.Handler:
    """Send the ``loom`` loggers' records to stderr as Cloud Logging JSON lines.

    Idempotent: calling it again returns the handler installed the first time.
    """
    logger = logging.getLogger("loom")
    for handler in logger.handlers:
        if isinstance(handler, _StderrHandler):
            return handler
    handler = _StderrHandler()
    handler.setFormatter(CloudLoggingFormatter())
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    return handler
