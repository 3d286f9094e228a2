"""``GET /executions/{id}/streams/{key}``: read a flow's stream from an offset, mounted by
:mod:`loom.workers.http_routes` and checked as a read.

Query parameters: ``offset`` (default 0), ``limit`` (values at most, default 100, at most
1000) and ``timeout`` (seconds to wait for a first value past ``offset``, default 0, at most
60). The answer is a :class:`~loom.primitives.streams.StreamChunk`: the values, the
``next_offset`` to read from next, and ``closed`` once no more will come (see
:mod:`loom.primitives.streams`). A reader follows a stream by reading again from
``next_offset`` with a ``timeout`` until ``closed``.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask import Request

from loom.ids import check_execution_id
from loom.primitives.streams import MAX_LIMIT
from loom.workers.http_base import HttpError, Reply, Services, run
from loom.workers.logs import bind
from loom.workers.update_routes import seconds, waiting


def read_stream(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /executions/{id}/streams/{key}[?offset=&limit=&timeout=]``."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id, stream=args[1])
    offset = _whole(request, "offset", 0, None)
    limit = _whole(request, "limit", 100, MAX_LIMIT)
    timeout = seconds(request, "timeout", 0.0)
    with waiting(s, timeout):
        chunk = run(
            s.runtime.read_stream(execution_id, args[1], offset, limit=limit, timeout=timeout)
        )
    return 200, chunk


def _whole(request: Request, name: str, default: int, most: int | None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    low = 1 if name == "limit" else 0
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18) or not low <= int(raw) <= (
        most if most is not None else int(raw)
    ):
        bound = f"from {low} to {most}" if most is not None else f">= {low}"
        raise HttpError(
            400,
            "invalid_request",
            f"query parameter {name!r} must be a whole number {bound}, got {raw[:40]!r}",
            {"parameter": name},
        )
    return int(raw)
