"""Stored events this release cannot read, as a store error that names them.

A log holds what some release of Loom wrote. During a rolling deploy an older worker may
read an event type a newer one recorded, and a damaged file or document may hold a body
that is no event at all. Neither is the caller's bad input nor an internal bug: it is a
:class:`~loom.errors.StoreError` (HTTP 503, retried: a newer worker can read it) whose
message names the execution, the event's seq and what did not fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from loom.errors import StoreError
from loom.events import EVENT_ADAPTER, Event


def parse_events(bodies: Sequence[str | bytes], first_seq: int, execution_id: str) -> list[Event]:
    """The events stored as ``bodies`` (seqs from ``first_seq`` on), parsed.

    Raises:
        StoreError: A body is not an event this release knows (``code="unreadable_event"``).
    """
    parse = EVENT_ADAPTER.validate_json
    try:
        return [parse(body) for body in bodies]
    except ValidationError:
        pass  # (the slow path: find which one, to name it)
    for seq, body in enumerate(bodies, start=first_seq):
        try:
            parse(body)
        except ValidationError as exc:
            raise unreadable_event(execution_id, seq, exc) from exc
    raise AssertionError("unreachable: a body failed to parse once only")


def unreadable_event(execution_id: str, seq: int, exc: ValidationError) -> StoreError:
    """The error for event ``seq`` of ``execution_id``, which failed to parse with ``exc``."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    if first["type"] == "union_tag_invalid":  # (pydantic's message lists every known type)
        problem = f"unknown event type {first.get('ctx', {}).get('tag')!r}"
    else:
        problem = f"{where}: {first['msg']}" if where else first["msg"]
    return StoreError(
        f"event {seq} of execution {execution_id!r} cannot be read by this release "
        f"({problem}); it was written by a newer release of Loom, or the stored log is damaged",
        code="unreadable_event",
        details={"execution_id": execution_id, "seq": seq},
    )
