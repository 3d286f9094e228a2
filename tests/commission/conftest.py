"""Fixtures for the Commission tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from loom.commission import CaseStore
from loom.store import EventStore, InMemoryEventStore
from tests.commission.connectors_service import ConnectorsService
from tests.contracts.conftest import BACKENDS, make_store


@pytest.fixture(params=BACKENDS)
async def event_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    """A fresh event store of each backend in turn (memory, SQLite, Firestore emulator)."""
    store = await make_store(request.param, tmp_path, request)
    yield store
    await store.aclose()


@pytest.fixture
def cases() -> CaseStore:
    """Cases on an in-memory event store."""
    return CaseStore(InMemoryEventStore())


@pytest.fixture
def connectors() -> Iterator[ConnectorsService]:
    """A Connectors service on 127.0.0.1, on an ephemeral port."""
    service = ConnectorsService().start()
    yield service
    service.stop()
