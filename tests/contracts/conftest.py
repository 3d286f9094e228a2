"""Every backend of the ``EventStore`` SPI, behind one ``store`` fixture.

A backend joins by adding its name to ``BACKENDS`` and a branch in ``make_store``; the
contract tests in this folder then run against it unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
