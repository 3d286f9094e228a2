"""Fixtures of the flow-control tests: a store on SQLite (on disk) and on the Firestore
emulator, and a runtime over it with a blob store and a clock the test moves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.store import EventStore
from tests.contracts.conftest import make_store

STORES = [pytest.param("sqlite"), pytest.param("firestore", marks=pytest.mark.slow)]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    """A fresh store: SQLite on disk, then the Firestore emulator."""
    s = await make_store(request.param, tmp_path, request)
    yield s
    await s.aclose()
