"""The console's list pages: what each one reads from the store, as template context.

Every page reads summaries, never a whole table: the list is one ``browse`` page plus
``count_by_status`` (or, for a filter the indexes do not hold, a bounded walk:
:mod:`loom.workers.console.search`), and the in-doubt queue one ``browse`` page of ``in_doubt``
executions. The execution page is :mod:`loom.workers.console.execution`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask import Request

from loom.kernel.fold import ExecutionState
from loom.store.base import STATUSES, ExecutionSummary
from loom.store.browse import BrowseQuery
from loom.wire import ExecutionResult
from loom.workers.console.execution import bad_query
from loom.workers.console.search import SCAN_LIMIT, Deep, Found, parse_published, search
from loom.workers.http_base import Services, run

PAGE_SIZE = 50
PARKED = "parked"
"""The list's status filter for executions parked for an operator (poison, divergence): a
park keeps the status ``suspended`` and records a reason."""
FILTERS = ("status", "flow", "from", "to", "q", "key", "published")


def _parse_time(name: str, raw: str) -> float | None:
    """A time filter: epoch seconds, or an ISO date/time read as UTC when it has no zone."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise bad_query(
            f"{name} must be a date and time like 2026-01-31T14:00 (UTC) or epoch seconds, "
            f"not {raw!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _cursor(req: Request) -> tuple[float, str] | None:
    at, eid = req.args.get("after_t"), req.args.get("after_id")
    if at is None or eid is None:
        return None
    try:
        return float(at), eid
    except ValueError:
        raise bad_query(f"after_t must be a number, not {at!r}") from None


def _bounded(req: Request, name: str, limit: int) -> str | None:
    value = req.args.get(name, "").strip() or None
    if value is not None and len(value.encode()) > limit:
        raise bad_query(f"{name} must be at most {limit} bytes")
    return value


def browse_query(req: Request) -> tuple[BrowseQuery, Deep]:
    """The list page's filters from its URL: those the store's indexes answer, and those
    a walk must decide (:mod:`loom.workers.console.search`).

    Raises:
        InputError: An unknown status, a bad time, a filter too long, or a bad cursor.
    """
    status = req.args.get("status", "") or None
    if status is not None and status not in (*STATUSES, PARKED):
        raise bad_query(f"status must be one of {', '.join((*STATUSES, PARKED))}, not {status!r}")
    published = _bounded(req, "published", 2048)
    deep = Deep(
        parked=status == PARKED,
        correlation_key=_bounded(req, "key", 1024),
        published=parse_published(published) if published else None,
    )
    query = BrowseQuery(
        status=None if status == PARKED else status,
        flow=_bounded(req, "flow", 256),
        created_from=_parse_time("from", req.args.get("from", "")),
        created_before=_parse_time("to", req.args.get("to", "")),
        id_prefix=_bounded(req, "q", 255),
        limit=PAGE_SIZE,
        after=_cursor(req),
    )
    return query, deep


def executions_page(s: Services, req: Request) -> dict[str, Any]:
    """The executions list: status counts, filters, one page of rows, the next page's link."""
    query, deep = browse_query(req)

    async def read() -> tuple[dict[str, int], Found]:
        counts = await s.runtime.store.count_by_status(flow=query.flow)
        if deep.active:
            return counts, await search(s.runtime, query, deep, PAGE_SIZE)
        rows = await s.runtime.store.browse(query)
        more = len(rows) == query.limit
        return counts, Found(rows, rows[-1].cursor if more else None, len(rows), False)

    counts, found = run(read())
    return {
        "counts": counts,
        "total": sum(counts.values()),
        "rows": found.rows,
        "next": found.next,
        "scan": {"deep": deep.active, "scanned": found.scanned, "stopped": found.stopped},
        "scan_limit": SCAN_LIMIT,
        "filters": {k: req.args.get(k, "") for k in FILTERS},
        "statuses": STATUSES,
        "parked": PARKED,
    }


@dataclass
class Doubt:
    """One in-doubt step of the queue."""

    summary: ExecutionSummary
    step_id: str
    effect: str
    idempotency_key: str | None
    started_at: float | None
    episode: int | None


def in_doubt_page(s: Services, req: Request) -> dict[str, Any]:
    """The in-doubt queue: a page of in-doubt executions, one row per step in doubt."""
    after = _cursor(req)

    async def read() -> tuple[list[ExecutionSummary], list[Doubt], int]:
        page = await s.runtime.store.browse(
            BrowseQuery(status="in_doubt", limit=PAGE_SIZE, after=after)
        )
        doubts: list[Doubt] = []
        for summary in page:
            state = await s.runtime.load_state(summary.execution_id)
            doubts.extend(_doubts(summary, state))
        counts = await s.runtime.store.count_by_status()
        return page, doubts, counts["in_doubt"]

    page, doubts, total = run(read())
    more = len(page) == PAGE_SIZE
    return {"doubts": doubts, "total": total, "next": page[-1].cursor if more else None}


def _doubts(summary: ExecutionSummary, state: ExecutionState) -> list[Doubt]:
    result = ExecutionResult.from_state(state, include_state=False)
    return [
        Doubt(summary, d.step_id, d.effect, d.idempotency_key, d.started_at, d.episode)
        for d in result.in_doubt
    ]


def list_token(s: Services, req: Request) -> dict[str, Any]:
    """What a list page polls to know it is stale: the counts by status and the newest
    change among the rows its filters select (one indexed page of one row)."""
    query, _ = browse_query(req)

    async def read() -> tuple[dict[str, int], list[ExecutionSummary]]:
        counts = await s.runtime.store.count_by_status(flow=query.flow)
        newest = await s.runtime.store.browse(BrowseQuery(flow=query.flow, limit=1))
        return counts, newest

    counts, newest = run(read())
    head = f"{newest[0].execution_id}@{newest[0].last_seq}" if newest else ""
    token = ",".join(f"{k}={counts[k]}" for k in sorted(counts)) + f";{head}"
    return {"token": token, "counts": counts}
