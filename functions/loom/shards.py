"""Shards: a fixed, stable split of executions for listings, scans and task routing.

An execution's shard is ``shard_of(execution_id, n)``: the first eight bytes of the SHA-256
of its id (UTF-8), big-endian, modulo ``n``. It depends on nothing but the id and ``n``, so
every process, every Python version and every machine computes the same shard, and an
execution never moves. A store that shards (Firestore) writes it on the execution document
and leads every ordered index with it, so inserts spread over ``n`` index ranges instead of
landing at the tail of one; listings fan out over the shards and merge. The dispatcher routes
an execution's tasks by the same number, so one workload's backlog stays in its queues.

``n`` is fixed for a database's life (a store records it beside the data): changing it
would move every execution to another shard.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")
K = TypeVar("K")

MAX_SHARDS = 1024


def shard_of(key: str, shards: int) -> int:
    """The shard of ``key`` (an execution id, a queue's partition key, a schedule's name)
    among ``shards``: stable across processes and Python versions.

    Raises:
        ValueError: ``shards`` is not 1 to :data:`MAX_SHARDS`.
    """
    check_shards(shards)
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def check_shards(shards: object) -> int:
    """``shards`` if it is a usable shard count, else a ``ValueError`` naming the range."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"a shard count is an integer from 1 to {MAX_SHARDS}, not {shards!r}")
    return int(shards)


@dataclass
class _Stream(Generic[T, K]):
    shard: int
    rows: list[T] = field(default_factory=lambda: list[T]())
    after: K | None = None
    done: bool = False
    size: int = 0


async def merge_shards(
    shards: int,
    fetch: Callable[[int, K | None, int], Awaitable[Sequence[T]]],
    key: Callable[[T], K],
    limit: int,
    *,
    descending: bool = False,
    after: K | None = None,
) -> list[T]:
    """The first ``limit`` rows of the union of ``shards`` ordered streams, in order.

    ``fetch(shard, after, n)`` returns up to ``n`` rows of one shard strictly after the key
    ``after`` (``None``: from the start), in the streams' order. Every shard is asked for a
    few rows at once; then, in rounds, every shard whose last row still comes before the
    ``limit``-th row merged so far (it may hold more rows that belong in the page) is asked
    for more, all of them at once, twice as many each round. So a page costs about its own
    rows plus a few per shard, in a handful of parallel rounds. The merge is exact: a shard
    left alone has shown a row past the page's last.

    Args:
        shards: How many streams (shards ``0 .. shards-1``).
        fetch: Reads one page of one shard.
        key: A row's sort key (unique across shards, e.g. ``(created_at, id)``).
        limit: Rows wanted.
        descending: The streams (and the result) are in descending key order.
        after: Start strictly after this key.
    """
    if limit <= 0:
        return []
    first = max(2, -(-limit // shards) + 1)
    streams: list[_Stream[T, K]] = [_Stream(s, after=after, size=first) for s in range(shards)]
    await _fill(streams, fetch, key)
    while True:
        order = cast("Callable[[T], Any]", key)  # (keys compare: tuples, numbers, strings)
        rows: list[T] = sorted((r for s in streams for r in s.rows), key=order, reverse=descending)
        edge = key(rows[limit - 1]) if len(rows) >= limit else None
        needy = [
            s for s in streams if not s.done and (edge is None or not _past(s, edge, descending))
        ]
        if not needy:
            return rows[:limit]
        for s in needy:
            s.size = min(s.size * 2, limit)
        await _fill(needy, fetch, key)


def _past(stream: _Stream[T, K], edge: K, descending: bool) -> bool:
    """Whether the stream's last row comes after ``edge`` in the merged order."""
    last = stream.after
    assert last is not None
    return (last < edge) if descending else (last > edge)  # type: ignore[operator]


async def _fill(
    streams: list[_Stream[T, K]],
    fetch: Callable[[int, K | None, int], Awaitable[Sequence[T]]],
    key: Callable[[T], K],
) -> None:
    async def one(s: _Stream[T, K]) -> None:
        rows = list(await fetch(s.shard, s.after, s.size))
        s.rows.extend(rows)
        s.done = len(rows) < s.size
        if rows:
            s.after = key(rows[-1])

    await asyncio.gather(*(one(s) for s in streams if not s.done))
