"""The ``BlobStore`` contract, run unchanged against every backend.

A backend joins by adding a param to ``BACKENDS`` and a branch in ``make_blob_store``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.blobs import BlobStore, InMemoryBlobStore, LocalBlobStore
from loom.errors import BlobNotFoundError, StoreError

BACKENDS = [
    pytest.param("memory"),
    pytest.param("local"),
    pytest.param("gcs", marks=pytest.mark.slow),
    pytest.param("s3", marks=pytest.mark.slow),
]


def make_blob_store(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> BlobStore:
    """A fresh, empty blob store of the named backend."""
    if name == "memory":
        return InMemoryBlobStore()
    if name == "local":
        return LocalBlobStore(tmp_path / "blobs")
    if name in ("gcs", "s3"):
        return request.getfixturevalue(f"{name}_blob_store_factory")()
    raise AssertionError(f"unknown backend {name}")


@pytest.fixture(params=BACKENDS)
async def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    store = make_blob_store(request.param, tmp_path, request)
    yield store
    await store.aclose()


async def test_put_then_get_returns_the_bytes(blobs: BlobStore) -> None:
    ref = await blobs.put("e1/3/output", b'{"big": true}')
    assert isinstance(ref, str) and ref
    assert await blobs.get(ref) == b'{"big": true}'


async def test_binary_empty_and_large_payloads_round_trip(blobs: BlobStore) -> None:
    payloads = {"all-bytes": bytes(range(256)) * 4, "empty": b"", "large": os.urandom(3 << 20)}
    refs = {name: await blobs.put(f"e1/{name}", data) for name, data in payloads.items()}
    assert len(set(refs.values())) == 3
    for name, data in payloads.items():
        assert await blobs.get(refs[name]) == data


async def test_a_missing_blob_raises_not_found(blobs: BlobStore) -> None:
    ref = await blobs.put("e1/present", b"x")
    missing = ref.replace("present", "absent")
    assert missing != ref
    with pytest.raises(BlobNotFoundError):
        await blobs.get(missing)


async def test_a_foreign_reference_is_refused(blobs: BlobStore) -> None:
    with pytest.raises(ValueError):
        await blobs.get("nowhere://bucket/e1/x")


async def test_putting_the_same_bytes_again_returns_the_same_ref(blobs: BlobStore) -> None:
    first = await blobs.put("e1/1/out", b"same")
    assert await blobs.put("e1/1/out", b"same") == first
    assert await blobs.get(first) == b"same"


async def test_a_key_is_written_once(blobs: BlobStore) -> None:
    ref = await blobs.put("e1/1/out", b"first")
    with pytest.raises(StoreError) as info:
        await blobs.put("e1/1/out", b"second")
    assert not isinstance(info.value, BlobNotFoundError)
    assert await blobs.get(ref) == b"first"


async def test_keys_are_independent(blobs: BlobStore) -> None:
    refs = [await blobs.put(f"exec-{i}/step/{i}", str(i).encode()) for i in range(5)]
    refs.append(await blobs.put("Zoë/東京/data", b"unicode"))
    assert [await blobs.get(r) for r in refs] == [b"0", b"1", b"2", b"3", b"4", b"unicode"]


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "../x", "a/.hidden", "a\\b", "x\n"])
async def test_invalid_keys_are_refused(blobs: BlobStore, key: str) -> None:
    with pytest.raises(ValueError):
        await blobs.put(key, b"x")


async def test_racing_writers_of_one_key_agree_on_one_value(blobs: BlobStore) -> None:
    same = await asyncio.gather(*(blobs.put("race/same", b"v") for _ in range(4)))
    assert len(set(same)) == 1
    outcomes = await asyncio.gather(
        *(blobs.put("race/other", f"v{i}".encode()) for i in range(4)), return_exceptions=True
    )
    won = [o for o in outcomes if isinstance(o, str)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert won and all(isinstance(e, StoreError) for e in lost)
    stored = await blobs.get(won[0])
    # The winners are exactly the writers whose bytes are stored.
    assert len(won) == 1 and stored in {f"v{i}".encode() for i in range(4)}


async def test_delete_prefix_deletes_exactly_the_blobs_under_it(blobs: BlobStore) -> None:
    doomed = [await blobs.put(k, b"x") for k in ("e1/input/h", "e1/s/1/output/h", "e1/output/h")]
    kept = [await blobs.put(k, b"y") for k in ("e10/input/h", "e2/e1/h", "e1x/h")]
    assert await blobs.delete_prefix("e1/") == 3
    for ref in doomed:
        with pytest.raises(BlobNotFoundError):
            await blobs.get(ref)
    assert [await blobs.get(ref) for ref in kept] == [b"y"] * 3
    assert await blobs.delete_prefix("e1/") == 0  # idempotent
    assert await blobs.delete_prefix("nothing-here/") == 0


async def test_a_deleted_key_can_be_written_again(blobs: BlobStore) -> None:
    await blobs.put("e1/input/h", b"old")
    await blobs.delete_prefix("e1/")
    ref = await blobs.put("e1/input/h", b"new")  # a purged id started again
    assert await blobs.get(ref) == b"new"


@pytest.mark.parametrize("prefix", ["e1", "", "/", "../", "e1//", "a/./"])
async def test_delete_prefix_refuses_what_is_not_whole_segments(
    blobs: BlobStore, prefix: str
) -> None:
    await blobs.put("e1/input/h", b"x")
    with pytest.raises(ValueError):
        await blobs.delete_prefix(prefix)
    assert await blobs.delete_prefix("e1/") == 1
