"""Which executions a bulk operation (:mod:`loom.ops.bulk`) acts on.

A :class:`Selection` is a filter: a flow, a status, a time range of creation, a list of ids,
and a limit; the filters given all apply. Each operation acts on executions in some
statuses only (a cancel on those not finished, a resume on those waiting, a retry on dead
letters), and a selection without a status takes all of those. Executions are selected
newest first (by creation, as the console lists them), at most ``limit`` of them; :attr:`Selected.more` says whether
more matched. Named ids are read one by one; every other selection is read from the store's
browsing index a page at a time, never a whole table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from loom.errors import InputError, UnknownExecutionError
from loom.ids import check_execution_id
from loom.kernel.poison import POISON
from loom.ops.deadletters import is_redrive
from loom.store.browse import BrowseQuery

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.store.base import ExecutionSummary, ListCursor

Operation = Literal["cancel", "resume", "retry"]
OPERATIONS: Final[tuple[Operation, ...]] = ("cancel", "resume", "retry")
MAX_LIMIT: Final = 1000
PARKED: Final = "parked"
"""A status filter: parked for an operator (poison, a divergence); a park keeps ``suspended``."""
# What each operation may act on: a status filter, and the summary status it reads.
FILTERS: Final[dict[Operation, dict[str, str]]] = {
    "cancel": {
        "running": "running",
        "suspended": "suspended",
        "in_doubt": "in_doubt",
        PARKED: "suspended",
        POISON: "suspended",
    },
    "resume": {"suspended": "suspended", "running": "running"},
    "retry": {"failed": "failed", PARKED: "suspended", POISON: "suspended"},
}
DEFAULTS: Final[dict[Operation, tuple[str, ...]]] = {
    "cancel": ("running", "suspended", "in_doubt"),
    "resume": ("suspended",),
    "retry": ("failed", PARKED),
}
_PAGE: Final = 200


@dataclass(frozen=True)
class Selection:
    """Which executions a bulk operation acts on (the filters given all apply).

    Attributes:
        flow: Only executions of this flow.
        status: Only this status (:data:`FILTERS` says which each operation takes; none:
            all of them, :data:`DEFAULTS`).
        created_from: Only executions created at or after this time (epoch seconds).
        created_before: Only executions created before this time (epoch seconds).
        execution_ids: Only these executions.
        limit: At most this many (1 to :data:`MAX_LIMIT`).
    """

    flow: str | None = None
    status: str | None = None
    created_from: float | None = None
    created_before: float | None = None
    execution_ids: Sequence[str] | None = None
    limit: int = 100

    def check(self, operation: Operation) -> None:
        """Refuse a selection ``operation`` cannot act on, naming what is wrong.

        Raises:
            InputError: An unknown operation or status, a limit out of range, an empty
                time range, or an invalid id.
        """
        if operation not in FILTERS:
            raise InputError(
                f"the operation must be one of {', '.join(OPERATIONS)}, not {operation!r}",
                details={"operation": operation},
            )
        if self.status is not None and self.status not in FILTERS[operation]:
            raise InputError(
                f"{operation} acts on executions that are {', '.join(FILTERS[operation])}; "
                f"not {self.status!r}",
                details={"status": self.status, "operation": operation},
            )
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InputError(f"limit must be 1 to {MAX_LIMIT}, not {self.limit}")
        low, high = self.created_from, self.created_before
        if low is not None and high is not None and low >= high:
            raise InputError(
                "the time range is empty: created_from must be before created_before",
                details={"created_from": low, "created_before": high},
            )
        for eid in self.execution_ids or ():
            check_execution_id(eid)


@dataclass
class Selected:
    """What a selection found.

    Attributes:
        rows: The executions to act on, newest first (named ones: in the order named).
        more: More executions matched than the limit.
        skipped: Named executions left out, with why (unknown, or not matching).
    """

    rows: list[ExecutionSummary] = field(default_factory=list["ExecutionSummary"])
    more: bool = False
    skipped: list[tuple[str, str, ExecutionSummary | None]] = field(
        default_factory=list[tuple[str, str, "ExecutionSummary | None"]]
    )


async def select(runtime: Runtime, operation: Operation, selection: Selection) -> Selected:
    """The executions ``selection`` names for ``operation`` (see the module docstring)."""
    selection.check(operation)
    if selection.execution_ids is not None:
        return await _named(runtime, operation, selection)
    found: list[ExecutionSummary] = []
    for status in (selection.status,) if selection.status else DEFAULTS[operation]:
        found.extend(await _browse(runtime, operation, status, selection))
    found.sort(key=lambda row: row.cursor, reverse=True)
    limit = selection.limit
    return Selected(found[:limit], len(found) > limit)


async def _named(runtime: Runtime, operation: Operation, selection: Selection) -> Selected:
    got = Selected()
    for eid in dict.fromkeys(selection.execution_ids or ()):
        try:
            row = await runtime.store.summary(eid)
        except UnknownExecutionError:
            got.skipped.append((eid, "unknown execution", None))
            continue
        why = await _mismatch(runtime, operation, selection, row, named=True)
        if why is not None:
            got.skipped.append((eid, why, row))
        elif len(got.rows) < selection.limit:
            got.rows.append(row)
        else:
            got.more = True
    return got


async def _browse(
    runtime: Runtime, operation: Operation, status: str, selection: Selection
) -> list[ExecutionSummary]:
    """Up to ``limit + 1`` executions of one status filter (one more: is there more?)."""
    found: list[ExecutionSummary] = []
    after: ListCursor | None = None
    while True:
        query = BrowseQuery(
            status=FILTERS[operation][status],
            flow=selection.flow,
            created_from=selection.created_from,
            created_before=selection.created_before,
            limit=_PAGE,
            after=after,
        )
        page = await runtime.store.browse(query)
        for row in page:
            if await _mismatch(runtime, operation, selection, row, status=status) is None:
                found.append(row)
                if len(found) > selection.limit:
                    return found
        if len(page) < _PAGE:
            return found
        after = page[-1].cursor


async def _mismatch(
    runtime: Runtime,
    operation: Operation,
    selection: Selection,
    row: ExecutionSummary,
    *,
    status: str | None = None,
    named: bool = False,
) -> str | None:
    """Why ``row`` is not one ``operation`` acts on under ``selection``; ``None`` if it is."""
    if selection.flow is not None and row.flow != selection.flow:
        return f"of flow {row.flow}, not {selection.flow}"
    if selection.created_from is not None and row.created_at < selection.created_from:
        return "created before the time range"
    if selection.created_before is not None and row.created_at >= selection.created_before:
        return "created after the time range"
    asked = status or selection.status
    wanted = (asked,) if asked else DEFAULTS[operation]
    if not any(_is(row, kind) for kind in wanted):
        return f"{_described(row)}: {operation} acts on {', '.join(wanted)}"
    # A bulk retry leaves out the re-drives of failed executions (their originals stand for
    # them: see loom.ops.deadletters); a named one is retried as asked.
    if operation == "retry" and not named and await is_redrive(runtime, row):
        return "a re-drive of another failed execution"
    return None


def _is(row: ExecutionSummary, kind: str) -> bool:
    reason = row.parked_reason or ""
    if kind == PARKED:
        return row.status == "suspended" and bool(reason)
    if kind == POISON:
        return row.status == "suspended" and reason.startswith(POISON)
    return row.status == kind


def _described(row: ExecutionSummary) -> str:
    return "parked" if row.parked_reason else row.status
