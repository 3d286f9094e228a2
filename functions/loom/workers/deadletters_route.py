"""``GET /dead-letters`` and ``POST /dead-letters/retry``: dead letters over HTTP.

The listing is a read (the caller check only, action ``list``). The re-drive is an operator
decision, authorized like ``POST /executions/{id}/retry`` (the verdict authenticator, action
``retry``, with no execution id) and recorded with who asked; ``dry_run`` writes nothing.
See :mod:`loom.deadletters` for what re-driving each kind does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loom.deadletters import Kind, Redrive, check_kind, find, parse_since, redrive
from loom.errors import InputError
from loom.workers.http_routes import (
    HttpError,
    Reply,
    Request,
    Services,
    authorize,
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
    by: str | None = Field(default=None, min_length=1, max_length=256)


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
    by = f"{body.by} (via {principal})" if body.by else principal

    async def go() -> list[Redrive]:
        since = parse_since(body.since, s.runtime.clock()) if body.since else None
        rows = await find(
            s.runtime, body.status, flow=body.flow, since=since, limit=body.limit, bulk=True
        )
        return await redrive(s.runtime, rows, by=by, dry_run=body.dry_run)

    done = run(go())
    return 200, {"dry_run": body.dry_run, "redriven": [item.to_json() for item in done]}


def _row(eid: str, flow: str, status: str, reason: str | None, at: float) -> dict[str, Any]:
    return {"execution_id": eid, "flow": flow, "status": status, "reason": reason, "updated_at": at}


def _message(exc: Exception) -> str:
    if isinstance(exc, InputError):
        return exc.message
    return "limit must be an integer"
