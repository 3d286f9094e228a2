"""Searching executions by what the store's indexes do not hold: parked ones, a correlation
key, a published value.

The store answers status, flow, creation time and id prefix from its indexes
(:class:`~loom.store.browse.BrowseQuery`). The rest needs each candidate's summary
(``parked``) or folded state (a gate's correlation key, a value the flow published), so the
console walks the indexed listing newest first and keeps the rows that match, looking at no
more than :data:`SCAN_LIMIT` candidates per page request. A walk that stops at that bound
says so and hands a cursor to go on from, so a search over a large store is a series of
quick pages, never one long request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from loom.kernel.fold import ExecutionState
from loom.runtime import Runtime
from loom.store.base import ExecutionSummary, ListCursor
from loom.store.browse import BrowseQuery

SCAN_LIMIT = 500
"""Candidates looked at per page request when a filter needs more than the indexes."""
_WALK = 100
_ANY = object()  # a published key searched for without a value: any value matches


@dataclass(frozen=True)
class Deep:
    """The filters that need a row's summary or state, beyond the store's indexes.

    Attributes:
        parked: Only executions parked for an operator (a reason is recorded).
        correlation_key: Only executions that opened a gate, or received a resume, with
            this correlation key (in their current run).
        published: ``(key, value)``: only executions whose flow published ``value`` under
            ``key`` (its latest value); a value of :data:`_ANY` matches any value.
    """

    parked: bool = False
    correlation_key: str | None = None
    published: tuple[str, Any] | None = None

    @property
    def active(self) -> bool:
        """Whether any of these filters is set."""
        return self.parked or self.correlation_key is not None or self.published is not None

    @property
    def needs_state(self) -> bool:
        """Whether a row's folded state must be loaded to decide."""
        return self.correlation_key is not None or self.published is not None


def parse_published(text: str) -> tuple[str, Any] | None:
    """``key=value`` (the value read as JSON when it is JSON, else as text) or ``key``."""
    text = text.strip()
    if not text:
        return None
    key, sep, raw = text.partition("=")
    if not sep:
        return key.strip(), _ANY
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


@dataclass
class Found:
    """One page of a deep search.

    Attributes:
        rows: The matching rows, newest first.
        next: Where the next page starts (the last row looked at), or ``None`` at the end.
        scanned: How many candidates this page looked at.
        stopped: Whether the walk stopped at :data:`SCAN_LIMIT` before filling the page.
    """

    rows: list[ExecutionSummary]
    next: ListCursor | None
    scanned: int
    stopped: bool


def matches(state: ExecutionState, deep: Deep) -> bool:
    """Whether a folded state passes the state filters of ``deep``."""
    if deep.correlation_key is not None and not _has_key(state, deep.correlation_key):
        return False
    if deep.published is not None:
        key, value = deep.published
        found = state.published.get(key)
        if found is None or (value is not _ANY and found.get("value") != value):
            return False
    return True


def _has_key(state: ExecutionState, key: str) -> bool:
    if any(g["correlation_key"] == key for g in state.gates.values()):
        return True
    return any(k.partition("\x1f")[2] == key for k in state.resumes)


async def search(runtime: Runtime, query: BrowseQuery, deep: Deep, size: int) -> Found:
    """Walk the rows ``query`` selects, newest first, and keep those ``deep`` accepts."""
    if deep.parked:
        query = replace(query, status="suspended")  # a park keeps an execution suspended
    rows: list[ExecutionSummary] = []
    scanned = 0
    after = query.after
    while scanned < SCAN_LIMIT:
        page = await runtime.store.browse(replace(query, limit=_WALK, after=after))
        for row in page:
            scanned += 1
            after = row.cursor
            if await _accepts(runtime, row, deep):
                rows.append(row)
                if len(rows) == size:
                    return Found(rows, after, scanned, False)
            if scanned >= SCAN_LIMIT:
                return Found(rows, after, scanned, True)
        if len(page) < _WALK:
            return Found(rows, None, scanned, False)
    return Found(rows, after, scanned, True)


async def _accepts(runtime: Runtime, row: ExecutionSummary, deep: Deep) -> bool:
    if deep.parked and not row.parked_reason:
        return False
    if not deep.needs_state:
        return True
    return matches(await runtime.load_state(row.execution_id), deep)
