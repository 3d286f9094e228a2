"""Fixtures of the peer ports: a runtime over SQLite on disk with a clock the test moves, and
a way to "restart" it (a new runtime over the same file, as a new process would open it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.testing import FakeClock
from loom.wire import ExecutionPackage, ExecutionResult
from tests.peers.others import apps


@dataclass
class Engine:
    """A runtime over ``path`` and the clock it reads; ``restart`` opens the file again."""

    path: Path
    clock: FakeClock = field(default_factory=FakeClock)
    options: dict[str, Any] = field(default_factory=dict[str, Any])
    runtime: Runtime = field(init=False)

    def __post_init__(self) -> None:
        self.runtime = self._open()

    def _open(self) -> Runtime:
        store = SqliteEventStore(str(self.path))
        return Runtime(apps.app, store, clock=self.clock, **self.options)

    async def restart(self) -> Runtime:
        """Close the store and open a fresh runtime over the same file (nothing in memory)."""
        await self.runtime.store.aclose()
        self.runtime = self._open()
        return self.runtime

    async def execute(self, execution_id: str, reason: str = "timer") -> ExecutionResult:
        """One worker call, as a dispatcher's delivery would make it."""
        package = ExecutionPackage(execution_id=execution_id, reason=reason)  # type: ignore[arg-type]
        return await self.runtime.execute(package)

    async def skip(self, seconds: float) -> list[ExecutionResult]:
        """Move the clock and run every execution whose timer fell due."""
        self.clock.now += seconds
        due = await self.runtime.store.list("suspended", due_before=self.clock.now)
        return [await self.execute(row.execution_id) for row in due]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    """A fresh engine on a SQLite file of this test; the ledger emptied."""
    apps.LEDGER.clear()
    apps.FLAKY.clear()
    apps.SLOW_FAILURES.clear()
    made = Engine(tmp_path / "loom.db")
    yield made
    await made.runtime.store.aclose()
