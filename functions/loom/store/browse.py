"""Browsing executions for an operator: filtered, paged listings and counts by status.

:meth:`~loom.store.base.EventStore.browse` and
:meth:`~loom.store.base.EventStore.count_by_status` are part of the store SPI. This module
holds the query type and the default implementations, which any store gets for free: they
walk the store's own indexed listing (``list``), one page at a time, and filter in memory.
That is correct everywhere; a store with indexes to match (SQLite) answers the same
query directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loom.store.base import EventStore, ExecutionSummary, ListCursor

_WALK_PAGE = 500
MAX_BROWSE_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class BrowseQuery:
    """Which executions an operator wants to see, newest first.

    Every filter is optional; the given ones all apply.

    Attributes:
        status: Only this status.
        flow: Only this flow name (exact).
        created_from: Only executions created at or after this time (epoch seconds).
        created_before: Only executions created before this time (epoch seconds).
        id_prefix: Only execution ids starting with this text (an exact id matches itself).
        limit: At most this many rows (1 to :data:`MAX_BROWSE_LIMIT`).
        after: Resume strictly after this row (an :attr:`ExecutionSummary.cursor`).
    """

    status: str | None = None
    flow: str | None = None
    created_from: float | None = None
    created_before: float | None = None
    id_prefix: str | None = None
    limit: int = 50
    after: ListCursor | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_BROWSE_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_BROWSE_LIMIT}, not {self.limit}")

    def matches(self, row: ExecutionSummary) -> bool:
        """Whether ``row`` passes every filter (paging aside)."""
        return (
            (self.status is None or row.status == self.status)
            and (self.flow is None or row.flow == self.flow)
            and (self.created_from is None or row.created_at >= self.created_from)
            and (self.created_before is None or row.created_at < self.created_before)
            and (self.id_prefix is None or row.execution_id.startswith(self.id_prefix))
        )


async def browse_by_listing(store: EventStore, query: BrowseQuery) -> list[ExecutionSummary]:
    """The default ``browse``: walk ``list`` newest first and keep the rows that match.

    The walk stops at the first row created before ``created_from`` (nothing older can
    match), and when ``limit`` rows are found.
    """
    found: list[ExecutionSummary] = []
    cursor = query.after
    while len(found) < query.limit:
        page = await store.list(query.status, limit=_WALK_PAGE, after=cursor)
        for row in page:
            if query.created_from is not None and row.created_at < query.created_from:
                return found
            if query.matches(row):
                found.append(row)
                if len(found) == query.limit:
                    return found
        if len(page) < _WALK_PAGE:
            return found
        cursor = page[-1].cursor
    return found


async def count_by_scanning(
    store: EventStore, statuses: Sequence[str], flow: str | None
) -> dict[str, int]:
    """The default ``count_by_status``: walk ``scan`` over every status and count."""
    counts = dict.fromkeys(statuses, 0)
    after: str | None = None
    while True:
        page = await store.scan(statuses, after=after, limit=_WALK_PAGE)
        for row in page:
            if flow is None or row.flow == flow:
                counts[row.status] = counts.get(row.status, 0) + 1
        if len(page) < _WALK_PAGE:
            return counts
        after = page[-1].execution_id
