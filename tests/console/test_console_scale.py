"""The executions list over 100,000 executions on SQLite: counts and pages stay right.

The summary rows are written in one transaction through the store's own connection (a
second instead of a minute of appends); the pages are asked of the worker as deployed.
How fast they answer is measured by ``bench/console_list.py``, not asserted here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import functions_framework
import pytest

from loom.store import SqliteEventStore
from tests.console.dom import parse, select
from tests.functions.conftest import MAIN

pytestmark = pytest.mark.slow

N = 100_000
FLOWS = ("checkout", "refund", "reminder", "signup", "report")


def status_of(i: int) -> str:
    return "in_doubt" if i % 97 == 0 else "failed" if i % 10 == 3 else "completed"


def seed(path: Path) -> None:
    store = SqliteEventStore(path)
    con = store._con()  # pyright: ignore[reportPrivateUsage]
    rows = [
        (f"{FLOWS[i % 5]}-{i:06d}", FLOWS[i % 5], status_of(i), 2, 1e9 + i, 1e9 + i)
        for i in range(N)
    ]
    with con:
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO executions (id, flow, status, last_seq, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
    asyncio.run(store.aclose())


def listed(html: str) -> list[str]:
    return [el.attrs["data-id"] for el in parse(html) if el.tag == "tr" and "data-id" in el.attrs]


def test_pages_through_a_hundred_thousand_executions(
    shop_env: dict[str, str], tmp_path: Path
) -> None:
    seed(tmp_path / "loom.db")
    client = functions_framework.create_app("worker", str(MAIN)).test_client()
    first = client.get("/console/executions").get_data(as_text=True)
    assert select(first, "span", id="total")[0].text == str(N)
    doubts = sum(1 for i in range(N) if status_of(i) == "in_doubt")
    [link] = select(first, "a", data_status="in_doubt")
    assert link.text.split()[-1] == str(doubts)
    assert listed(first)[:2] == [
        f"{FLOWS[(N - 1) % 5]}-{N - 1:06d}",
        f"{FLOWS[(N - 2) % 5]}-{N - 2:06d}",
    ]
    # Walk every in-doubt refund, page by page, by the pages' own links.
    want = [
        f"refund-{i:06d}" for i in reversed(range(N)) if i % 5 == 1 and status_of(i) == "in_doubt"
    ]
    seen: list[str] = []
    url = "/console/executions?status=in_doubt&flow=refund"
    while url:
        html = client.get(url).get_data(as_text=True)
        seen.extend(listed(html))
        nxt = select(html, "a", id="next-page")
        url = "/console/executions" + nxt[0].attrs["href"] if nxt else ""
    assert seen == want and len(want) > 50  # more than one page
    found = client.get("/console/executions?q=signup-04999").get_data(as_text=True)
    assert listed(found) == [f"signup-04999{d}" for d in (8, 3)]
