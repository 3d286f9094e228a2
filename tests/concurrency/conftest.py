"""Concurrency tests run over every event store (``tests/contracts/conftest.py``'s backends):
racing writers must come out the same on each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.store import EventStore
from tests.contracts.conftest import BACKENDS, make_store


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    """A fresh store of each backend in turn."""
    s = await make_store(request.param, tmp_path, request)
    yield s
    await s.aclose()
