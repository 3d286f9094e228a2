"""Every backend of the ``EventStore`` and ``BlobStore`` SPIs, behind the ``store``,
``blobs`` and ``stores`` (every event store by every blob store) fixtures.

A backend joins by adding its name to ``BACKENDS`` (or ``BLOB_BACKENDS``) and a branch in
``make_store`` (or ``make_blob_store``); the contract tests in this folder then run against
it unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.blobs import BlobStore, InMemoryBlobStore, LocalBlobStore
from loom.store import EventStore, InMemoryEventStore, SqliteEventStore

BACKENDS = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("sqlite-off-loop"),
    pytest.param("firestore", marks=pytest.mark.slow),
]


async def make_store(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> EventStore:
    """Build a fresh, empty store of the named backend."""
    if name == "memory":
        return InMemoryEventStore()
    if name == "sqlite":
        return SqliteEventStore(tmp_path / "loom.db")
    if name == "sqlite-off-loop":  # how a served worker runs it: threads, not the loop
        store = SqliteEventStore(tmp_path / "loom.db")
        store.serve_off_loop()
        return store
    if name == "firestore":
        factory = request.getfixturevalue("firestore_store_factory")
        return await factory()
    raise AssertionError(f"unknown backend {name}")


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    """A fresh store of each backend in turn."""
    s = await make_store(request.param, tmp_path, request)
    yield s
    await s.aclose()


async def make_peer(store: EventStore) -> EventStore:
    """Another store object over ``store``'s data: how another process sees it. The memory
    store keeps its data in the object, so it is its own peer."""
    if isinstance(store, InMemoryEventStore):
        return store
    if isinstance(store, SqliteEventStore):
        return SqliteEventStore(store.path)
    client = store._client  # type: ignore[attr-defined]  # the Firestore store's own client
    return type(store)(project=client.project, database=client._database)  # type: ignore[call-arg]


@pytest.fixture
async def peer(store: EventStore) -> AsyncIterator[EventStore]:
    """Another store object over the data of ``store`` (see :func:`make_peer`)."""
    other = await make_peer(store)
    yield other
    if other is not store:
        await other.aclose()


BLOB_BACKENDS = [
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


@pytest.fixture(params=BLOB_BACKENDS)
async def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    """A fresh blob store of each backend in turn."""
    store = make_blob_store(request.param, tmp_path, request)
    yield store
    await store.aclose()


def _pairs() -> list[object]:
    pairs: list[object] = []
    for events in BACKENDS:
        for blobs in BLOB_BACKENDS:
            marks = [*events.marks, *blobs.marks]
            name = f"{events.values[0]}+{blobs.values[0]}"
            pairs.append(pytest.param((events.values[0], blobs.values[0]), marks=marks, id=name))
    return pairs


@pytest.fixture(params=_pairs())
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[EventStore, BlobStore]]:
    """Every event store with every blob store: fresh and empty."""
    events_name, blobs_name = request.param
    events = await make_store(events_name, tmp_path, request)
    blobs = make_blob_store(blobs_name, tmp_path, request)
    yield events, blobs
    await blobs.aclose()
    await events.aclose()
