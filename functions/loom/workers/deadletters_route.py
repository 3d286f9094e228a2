"""``GET /dead-letters`` and ``POST /dead-letters/retry``: dead letters over HTTP.

The listing is a read (the caller check only, action ``list``). The re-drive is an operator
decision, authorized like ``POST /executions/{id}/retry`` (the verdict authenticator, action
``retry``, with no execution id) and recorded with who asked; ``dry_run`` writes nothing.
The caller check (when configured) runs on each execution the re-drive selects, before any
is re-driven: a caller refused one of them is refused the whole request. ``execution_ids``
narrows the re-drive to named executions; those are checked before anything is read, so a
caller scoped to its own executions can re-drive them alone.
See :mod:`loom.ops.deadletters` for what re-driving each kind does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loom.errors import InputError
from loom.ids import ExecutionId
from loom.ops.deadletters import Kind, check_kind, find, find_named, parse_since, redrive
from loom.store.base import ExecutionSummary
from loom.workers.http_base import (
    HttpError,
    Reply,
    Request,
    Services,
    authorize,
    caller,
    check_caller,
    parse_json,
    parse_model,
    read_body,
    run,
)

MAX_LIMIT = 1000


class RedriveRequest(BaseModel):
    """``POST /dead-letters/retry`` body: which dead letters, and whether to only look."""

    model_config = ConfigDict(extra="forbid")

    status: Kind
    flow: str | None = Field(default=None, min_length=1, max_length=256)
    since: str | None = Field(
        default=None, max_length=64, description="An age (2h, 7d) or an ISO-8601 time."
    )
    limit: int = Field(default=100, ge=1, le=MAX_LIMIT)
    dry_run: bool = False
    by: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="A note recorded beside the authenticated principal; grants nothing.",
    )
    execution_ids: list[ExecutionId] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LIMIT,
        description="Only these executions (a filter, as flow and since are): the caller "
        "check is asked about each before anything is read.",
    )


def list_dead_letters(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /dead-letters?status=failed|poison|parked[&flow=F][&since=2h][&limit=N]``."""
    try:
        kind = check_kind(request.args.get("status", ""))
        limit = int(request.args.get("limit", "100"))
    except (InputError, ValueError) as exc:
        raise HttpError(400, "invalid_request", _message(exc), {}) from None
    if not 1 <= limit <= MAX_LIMIT:
        raise HttpError(400, "invalid_request", f"limit must be 1 to {MAX_LIMIT}", {})
    since_text = request.args.get("since")

    async def go() -> list[dict[str, Any]]:
        since = parse_since(since_text, s.runtime.clock()) if since_text else None
        flow = request.args.get("flow")
        rows = await find(s.runtime, kind, flow=flow, since=since, limit=limit)
        return [_row(r.execution_id, r.flow, r.status, r.parked_reason, r.updated_at) for r in rows]

    return 200, {"status": kind, "dead_letters": run(go())}


def redrive_dead_letters(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``POST /dead-letters/retry``: authorized, then each letter re-driven (or planned)."""
    raw = read_body(request, s.max_body)
    principal = authorize(s.verdict_auth, "retry", "", request, raw)
    body = parse_model(RedriveRequest, parse_json(request, raw))
    since = parse_since(body.since, s.runtime.clock()) if body.since else None
    if body.execution_ids is not None:  # named: checked before anything is read
        named = list(dict.fromkeys(body.execution_ids))
        for eid in named:
            check_caller(s, request, "retry", eid, raw, body.flow)
        found = find_named(
            s.runtime, named, body.status, flow=body.flow, since=since, limit=body.limit
        )
        rows = run(found)
    else:
        found = find(
            s.runtime, body.status, flow=body.flow, since=since, limit=body.limit, bulk=True
        )  # (a bulk selection: re-drives of failed executions are left out)
        rows = run(found)
        _check_each(s, request, raw, rows)  # before any is re-driven: all or nothing
    who = caller(request) or principal  # (the caller check ran after the operator check)
    # Authority is who the checks authenticated; the body's ``by`` is recorded beside it.
    done = run(redrive(s.runtime, rows, by=who, note=body.by, dry_run=body.dry_run))
    return 200, {"dry_run": body.dry_run, "redriven": [item.to_json() for item in done]}


def _check_each(
    s: Services, request: Request, raw: bytes, rows: Sequence[ExecutionSummary]
) -> None:
    """The caller check on every execution the re-drive selected (once with ``""`` when it
    selected none, so a refused caller learns nothing from the answer either way).

    The executions were selected by the server, not named by the caller: a refusal says
    neither which one was refused nor its flow (the check's own message may name them).
    """
    for row in rows or [None]:
        eid, flow = (row.execution_id, row.flow) if row is not None else ("", None)
        check_caller(s, request, "retry", eid, raw, flow, disclose=False)


def _row(eid: str, flow: str, status: str, reason: str | None, at: float) -> dict[str, Any]:
    return {"execution_id": eid, "flow": flow, "status": status, "reason": reason, "updated_at": at}


def _message(exc: Exception) -> str:
    if isinstance(exc, InputError):
        return exc.message
    return "limit must be an integer"
