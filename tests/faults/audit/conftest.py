"""What the fault audit's tests share: a runtime of the audit app on a SQLite file."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.runtime import Runtime
from loom.store import SqliteEventStore
from tests.faults.audit.audit_app import app


@pytest.fixture
async def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file, no blob store; the effects' ledger beside it."""
    monkeypatch.setitem(os.environ, "LOOM_TEST_SIDE_FILE", str(tmp_path / "ledger.txt"))
    store = SqliteEventStore(tmp_path / "loom.db")
    yield Runtime(app, store)
    await store.aclose()
