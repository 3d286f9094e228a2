"""The SQL behind the SQLite store's listings: ``list``, ``scan``, ``browse`` and
``count_by_status``.

Each filter maps onto an index of the ``executions`` table (``executions_created``,
``executions_status``, ``executions_flow`` and the primary key for an id prefix), so a page
of a listing over 100,000 executions reads about one page of rows, never the whole table.
The two indexes added for it hold no column an append changes (status, wake time), so
only ``create`` writes to them.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from loom.store.browse import BrowseQuery

INDEXES = """
CREATE INDEX IF NOT EXISTS executions_created ON executions(created_at, id);
CREATE INDEX IF NOT EXISTS executions_flow ON executions(flow, created_at, id);
"""


def prefix_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``.

    UTF-8 orders strings like their code points, and SQLite compares text bytewise, so
    ``prefix <= id < bound`` is exactly "starts with". ``None`` when there is no bound.
    """
    for cut in range(len(prefix) - 1, -1, -1):
        point = ord(prefix[cut]) + 1
        if 0xD800 <= point <= 0xDFFF:  # surrogates are not characters: skip past them
            point = 0xE000
        if point <= 0x10FFFF:
            return prefix[:cut] + chr(point)
    return None


def _filters(query: BrowseQuery) -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    # With an id prefix the primary key narrows best: "+column" keeps SQLite from choosing
    # the status or flow index instead (and scanning every execution with that status).
    plus = "+" if query.id_prefix else ""
    for column, value in (("status", query.status), ("flow", query.flow)):
        if value is not None:
            clauses.append(f"{plus}{column}=?")
            args.append(value)
    if query.created_from is not None:
        clauses.append("created_at>=?")
        args.append(query.created_from)
    if query.created_before is not None:
        clauses.append("created_at<?")
        args.append(query.created_before)
    if query.id_prefix:
        clauses.append("id>=?")
        args.append(query.id_prefix)
        bound = prefix_bound(query.id_prefix)
        if bound is not None:
            clauses.append("id<?")
            args.append(bound)
    return clauses, args


def browse_rows(con: sqlite3.Connection, columns: str, query: BrowseQuery) -> list[tuple[Any, ...]]:
    """The rows of one page of ``query``, newest first."""
    clauses, args = _filters(query)
    if query.after is not None:
        clauses.append("(created_at, id) < (?, ?)")
        args.extend(query.after)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    cur = con.execute(
        f"SELECT {columns} FROM executions {where} ORDER BY created_at DESC, id DESC LIMIT ?",
        (*args, query.limit),
    )
    return cur.fetchall()


def count_rows(con: sqlite3.Connection, flow: str | None) -> dict[str, int]:
    """Executions per status (of ``flow`` if given), from an index alone."""
    if flow is None:
        cur = con.execute("SELECT status, COUNT(*) FROM executions GROUP BY status")
    else:
        cur = con.execute(
            "SELECT status, COUNT(*) FROM executions WHERE flow=? GROUP BY status", (flow,)
        )
    return {str(status): int(n) for status, n in cur}


def list_rows(
    con: sqlite3.Connection,
    columns: str,
    status: str | None,
    due_before: float | None,
    limit: int,
    oldest_first: bool,
    after: tuple[float, str] | None,
) -> list[Any]:
    """The rows of ``EventStore.list``: by status and wake time, paged by ``(created_at, id)``."""
    clauses: list[str] = []
    args: list[object] = []
    if status is not None:
        clauses.append("status=?")
        args.append(status)
    if due_before is not None:
        clauses.append("wake_at IS NOT NULL AND wake_at<=?")
        args.append(due_before)
    if after is not None:
        clauses.append(f"(created_at, id) {'>' if oldest_first else '<'} (?, ?)")
        args.extend(after)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    order = "ASC" if oldest_first else "DESC"
    return con.execute(
        f"SELECT {columns} FROM executions {where} ORDER BY created_at {order}, id {order} LIMIT ?",
        (*args, limit),
    ).fetchall()


def scan_rows(
    con: sqlite3.Connection, columns: str, statuses: tuple[str, ...], after: str | None, limit: int
) -> list[Any]:
    """The rows of ``EventStore.scan``: the given statuses in id order, after ``after``."""
    marks = ",".join("?" * len(statuses)) or "NULL"
    return con.execute(
        f"SELECT {columns} FROM executions WHERE status IN ({marks}) AND id > ?"
        " ORDER BY id LIMIT ?",
        (*statuses, after if after is not None else "", limit),
    ).fetchall()
