"""Group commit without savepoints: a request that refuses after writing is undone alone.

``GroupCommitter`` applies a group's requests without a savepoint each and applies the
group again with savepoints only when one request must be undone on its own. These tests
drive the committer directly with request bodies a store would not send (one that writes
and then refuses), on a real SQLite file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loom.store.sqlite_group import GroupCommitter


@pytest.fixture
def con(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(tmp_path / "g.db", isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    yield connection
    connection.close()


def _insert(key: str) -> Callable[[sqlite3.Connection], str]:
    def body(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO t VALUES (?, 1)", (key,))
        return key

    return body


def _insert_then_refuse(key: str) -> Callable[[sqlite3.Connection], str]:
    def body(c: sqlite3.Connection) -> str:
        c.execute("INSERT INTO t VALUES (?, 1)", (key,))
        raise LookupError(f"{key} refused after writing")

    return body


def _refuse(c: sqlite3.Connection) -> str:
    c.execute("SELECT count(*) FROM t").fetchone()
    raise LookupError("refused before writing")


def _rows(con: sqlite3.Connection) -> list[str]:
    return [k for (k,) in con.execute("SELECT k FROM t ORDER BY k")]


async def _group(
    con: sqlite3.Connection, bodies: list[Callable[[sqlite3.Connection], str]]
) -> tuple[list[str | BaseException], int]:
    """Submit ``bodies`` in one loop turn (one group); their outcomes and the commits."""
    committer = GroupCommitter(lambda: con, lambda: None)

    async def submit(body: Callable[[sqlite3.Connection], str]) -> str:
        await asyncio.sleep(0)  # every submit is queued in the same turn: one group
        return await committer.submit(body, 1, "append", None)

    outcomes = await asyncio.gather(*(submit(b) for b in bodies), return_exceptions=True)
    return list(outcomes), committer.commits


async def test_a_refusal_before_writing_fails_alone_in_one_pass(
    con: sqlite3.Connection,
) -> None:
    outcomes, commits = await _group(con, [_insert("a"), _refuse, _insert("c")])
    assert outcomes[0] == "a" and outcomes[2] == "c"
    assert isinstance(outcomes[1], LookupError)
    assert _rows(con) == ["a", "c"] and commits == 1


async def test_a_refusal_after_writing_is_undone_alone(con: sqlite3.Connection) -> None:
    outcomes, commits = await _group(con, [_insert("a"), _insert_then_refuse("b"), _insert("c")])
    assert outcomes[0] == "a" and outcomes[2] == "c"
    assert isinstance(outcomes[1], LookupError)
    assert _rows(con) == ["a", "c"]  # b's row is gone, the others' are there
    assert commits == 1  # the second pass is in the same transaction


async def test_a_constraint_is_undone_alone(con: sqlite3.Connection) -> None:
    con.execute("INSERT INTO t VALUES ('b', 0)")
    outcomes, _ = await _group(con, [_insert("a"), _insert("b"), _insert("c")])
    assert outcomes[0] == "a" and outcomes[2] == "c"
    assert isinstance(outcomes[1], Exception) and not isinstance(outcomes[1], str)
    assert isinstance(outcomes[1].__cause__, sqlite3.IntegrityError)
    assert con.execute("SELECT v FROM t WHERE k='b'").fetchone() == (0,)
    assert _rows(con) == ["a", "b", "c"]
