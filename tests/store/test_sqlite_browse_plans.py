"""The SQLite store answers every console listing from an index: no query plan scans the
``executions`` table row by row, so a page costs about its own rows at any table size (the
timings over 100,000 executions are in ``bench/console_list.py``)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from loom.store import SqliteEventStore
from loom.store.browse import BrowseQuery
from loom.store.sqlite_browse import browse_rows, count_rows, prefix_bound
from loom.store.sqlite_schema import SUMMARY_COLUMNS

FILTERS = {
    "status": ["failed"],
    "flow": ["pay"],
    "created_from": [1.0],
    "created_before": [9.0],
    "id_prefix": ["ord"],
    "after": [(5.0, "x")],
}


def combinations() -> list[BrowseQuery]:
    queries: list[BrowseQuery] = []
    names = list(FILTERS)
    for size in range(len(names) + 1):
        for chosen in itertools.combinations(names, size):
            queries.append(BrowseQuery(**{name: FILTERS[name][0] for name in chosen}))  # type: ignore[arg-type]
    return queries


def plan_of(store: SqliteEventStore, sql: str, args: tuple[object, ...]) -> list[str]:
    return [row[3] for row in store._con().execute(f"EXPLAIN QUERY PLAN {sql}", args)]  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize("query", combinations(), ids=repr)
def test_every_filter_combination_reads_through_an_index(
    tmp_path: Path, query: BrowseQuery
) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    con = store._con()  # pyright: ignore[reportPrivateUsage]
    captured: list[tuple[str, tuple[object, ...]]] = []

    class Spy:
        def execute(self, sql: str, args: tuple[object, ...] = ()) -> object:
            captured.append((sql, args))
            return con.execute(sql, args)

    browse_rows(Spy(), SUMMARY_COLUMNS, query)  # type: ignore[arg-type]
    [(sql, args)] = captured
    plan = plan_of(store, sql, args)
    assert plan and all("USING" in step for step in plan if step.startswith(("SCAN", "SEARCH"))), (
        plan
    )
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan or query.id_prefix, plan
    asyncio.run(store.aclose())


def test_counting_reads_an_index(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    all_plan = plan_of(store, "SELECT status, COUNT(*) FROM executions GROUP BY status", ())
    assert all_plan == ["SCAN executions USING COVERING INDEX executions_status"]
    flow_plan = plan_of(
        store, "SELECT status, COUNT(*) FROM executions WHERE flow=? GROUP BY status", ("f",)
    )
    assert flow_plan[0].startswith("SEARCH executions USING INDEX executions_flow")
    assert count_rows(store._con(), None) == {}  # pyright: ignore[reportPrivateUsage]
    asyncio.run(store.aclose())


@pytest.mark.parametrize(
    ("prefix", "bound"),
    [("ab", "ac"), ("a\U0010ffff", "b"), ("\U0010ffff", None), ("\ud7ff", "\ue000"), ("", None)],
)
def test_the_prefix_bound_is_the_next_string_after_every_extension(
    prefix: str, bound: str | None
) -> None:
    assert prefix_bound(prefix) == bound
    if bound is not None:
        assert prefix + "\U0010ffff" * 3 < bound
