"""Shards (``loom.shards``): a stable shard per key, and an exact merge of ordered shard
streams that reads little more than the page it returns."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter

import pytest

from loom.shards import merge_shards, shard_of


def test_a_keys_shard_is_fixed_and_the_same_everywhere() -> None:
    # Pinned values: the hash is part of the data's layout (a document's shard, a task's
    # queue), so a change of function would move every execution.
    assert (shard_of("e1", 64), shard_of("order-1", 64), shard_of("x", 1)) == (50, 12, 0)
    digest = hashlib.sha256("ordre-été".encode()).digest()
    assert shard_of("ordre-été", 1000) == int.from_bytes(digest[:8], "big") % 1000


def test_shards_spread_sequential_ids_evenly() -> None:
    counts = Counter(shard_of(f"order-{i:06d}", 64) for i in range(64_000))
    assert len(counts) == 64 and max(counts.values()) < 1.15 * 1000


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, True])
def test_a_shard_count_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="shard count"):
        shard_of("e1", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(25))
def test_merging_shard_streams_is_exact_and_reads_little(seed: int) -> None:
    rng = random.Random(seed)
    shards, limit = rng.choice((1, 3, 16, 64)), rng.choice((1, 5, 50, 200))
    descending = rng.random() < 0.5
    rows = {s: sorted({rng.randrange(10_000) * 100 + s for _ in range(rng.randrange(40))})
            for s in range(shards)}  # fmt: skip
    read = Counter[int]()

    async def fetch(shard: int, after: int | None, n: int) -> list[int]:
        ordered = sorted(rows[shard], reverse=descending)
        if after is not None:
            ordered = [r for r in ordered if (r < after if descending else r > after)]
        read[shard] += len(ordered[:n])
        return ordered[:n]

    everything = sorted((r for rs in rows.values() for r in rs), reverse=descending)
    cursor = everything[len(everything) // 3] if everything and rng.random() < 0.5 else None
    got = asyncio.run(
        merge_shards(shards, fetch, lambda r: r, limit, descending=descending, after=cursor)
    )
    want = [r for r in everything if cursor is None or (r < cursor if descending else r > cursor)]
    assert got == want[:limit]
    assert sum(read.values()) <= 2 * limit + 3 * shards + limit  # the page, a few a shard
