"""The console's read-only pages: what each one reads from the store, as template context.

Every page reads summaries or one execution, never a whole table: the list is one
``browse`` page plus ``count_by_status``, the in-doubt queue one ``browse`` page of
``in_doubt`` executions, and the execution page its state (from the newest snapshot) plus a
window of its events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask import Request

from loom.console.timeline import PAYLOAD_FIELDS, build, pretty
from loom.errors import InputError
from loom.fold import ExecutionState
from loom.ids import check_execution_id
from loom.store.base import STATUSES, ExecutionSummary
from loom.store.browse import BrowseQuery
from loom.wire import ExecutionResult
from loom.workers.http_routes import Services, run

PAGE_SIZE = 50
EVENTS_PER_PAGE = 500


def bad_query(message: str) -> InputError:
    """The error for a console URL's query parameter that cannot be used (answered 400)."""
    return InputError(message, code="invalid_request")


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


def browse_query(req: Request) -> BrowseQuery:
    """The list page's filters from its URL.

    Raises:
        InputError: An unknown status, a bad time, or a bad cursor.
    """
    status = req.args.get("status", "") or None
    if status is not None and status not in STATUSES:
        raise bad_query(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    flow = req.args.get("flow", "").strip() or None
    if flow is not None and len(flow) > 256:
        raise bad_query("flow must be at most 256 characters")
    prefix = req.args.get("q", "").strip() or None
    if prefix is not None and len(prefix.encode()) > 255:
        raise bad_query("the id searched for must be at most 255 bytes")
    return BrowseQuery(
        status=status,
        flow=flow,
        created_from=_parse_time("from", req.args.get("from", "")),
        created_before=_parse_time("to", req.args.get("to", "")),
        id_prefix=prefix,
        limit=PAGE_SIZE,
        after=_cursor(req),
    )


def executions_page(s: Services, req: Request) -> dict[str, Any]:
    """The executions list: status counts, filters, one page of rows, the next page's link."""
    query = browse_query(req)

    async def read() -> tuple[dict[str, int], list[ExecutionSummary]]:
        counts = await s.runtime.store.count_by_status(flow=query.flow)
        return counts, await s.runtime.store.browse(query)

    counts, rows = run(read())
    more = len(rows) == query.limit
    return {
        "counts": counts,
        "total": sum(counts.values()),
        "rows": rows,
        "next": rows[-1].cursor if more else None,
        "filters": {k: req.args.get(k, "") for k in ("status", "flow", "from", "to", "q")},
        "statuses": STATUSES,
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


def execution_page(s: Services, req: Request, execution_id: str) -> dict[str, Any]:
    """One execution: where it stands, its gates, timers, claim, doubts and timeline."""
    check_execution_id(execution_id)
    raw = req.args.get("from_seq", "0")
    if not _is_seq(raw.removeprefix("-")):
        raise bad_query(f"from_seq must be a whole number, not {raw[:40]!r}")
    from_seq = max(0, int(raw))

    async def read() -> tuple[ExecutionSummary, ExecutionState, list[Any]]:
        summary = await s.runtime.require(execution_id)
        state = await s.runtime.load_state(execution_id)
        events = await s.runtime.store.read(execution_id, after_seq=from_seq)
        return summary, state, events

    summary, state, events = run(read())
    shown = events[:EVENTS_PER_PAGE]
    result = ExecutionResult.from_state(state, include_state=False)
    backoffs = {sid: r["not_before"] for sid, r in state.steps.items() if "not_before" in r}
    return {
        "summary": summary,
        "state": state,
        "result": result,
        "gates": state.open_gates(),
        "backoffs": backoffs,
        "timeline": build(shown, time.time(), state.finished),
        "next_seq": shown[-1].seq if len(events) > len(shown) else None,
        "from_seq": from_seq,
        "output": pretty(state.output) if state.output is not None else None,
        "error": pretty(state.error) if state.error is not None else None,
    }


def _is_seq(raw: str) -> bool:
    """Whether ``raw`` is a seq the store can look up: ASCII digits (``str.isdigit`` passes
    "²", which ``int`` refuses), and at most 18 of them (SQLite integers are 64-bit; a larger
    one was a 500)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= 18


def payload_text(s: Services, execution_id: str, seq_raw: str, name: str) -> str:
    """One recorded value of one event as indented JSON, read back from its blob if needed.

    Raises:
        InputError: A bad seq or field name, or an event without that value.
    """
    check_execution_id(execution_id)
    if name not in PAYLOAD_FIELDS:
        raise bad_query(f"field must be one of {', '.join(PAYLOAD_FIELDS)}, not {name!r}")
    if not _is_seq(seq_raw) or int(seq_raw) < 1:
        raise bad_query(f"seq must be a positive whole number, not {seq_raw!r}")
    seq = int(seq_raw)

    async def read() -> Any:
        await s.runtime.require(execution_id)
        events = await s.runtime.store.read(execution_id, after_seq=seq - 1)
        if not events or events[0].seq != seq or getattr(events[0], name, None) is None:
            raise bad_query(f"event {seq} of {execution_id!r} records no {name}")
        stored = getattr(events[0], name)
        if name == "error":
            return stored.model_dump() if hasattr(stored, "model_dump") else stored
        return await s.runtime.payloads.decode(stored, execution_id)

    return pretty(run(read()))
