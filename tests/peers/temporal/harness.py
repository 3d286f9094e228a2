"""A Loom runtime on SQLite on disk with a fake clock, every execute call checked by a replay.

What ``loom.testing.LoomTestEnv`` does in memory, on the embedded store a user runs: each
execute call that ends somewhere (completed, failed, cancelled, suspended) is followed by a
replay of the whole log against the same code, which must reach the same place without
invoking anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from loom import events as ev
from loom.app import Loom
from loom.blobs import LocalBlobStore
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.testing import FakeClock, check_replay, replay
from loom.wire import ExecutionPackage, ExecutionResult

_CHECKED = ("completed", "failed", "cancelled", "suspended")


class CheckedRuntime(Runtime):
    """A runtime whose every execute call is replayed from the log and compared."""

    always_replay = True

    async def execute(self, package: ExecutionPackage) -> ExecutionResult:
        result = await super().execute(package)
        # (A parked execution diverged on purpose: its replay would raise the same way.)
        if self.always_replay and result.status in _CHECKED and result.parked_reason is None:
            history = await self.store.read(package.execution_id)
            check_replay(await replay(self.app, history, self.payloads.blobs), result)
        return result


class Env:
    """One app on one SQLite file, with a clock that moves only when told to."""

    def __init__(self, app: Loom, path: Path, **options: Any) -> None:
        self.clock = FakeClock()
        self.store = SqliteEventStore(path / "loom.db")
        options.setdefault("blobs", LocalBlobStore(path / "blobs"))
        self.runtime = CheckedRuntime(app, self.store, clock=self.clock, **options)

    def deploy(self, app: Loom) -> None:
        """Swap the code under the same store, clock and blobs (a redeploy)."""
        old = self.runtime
        self.runtime = CheckedRuntime(app, self.store, clock=self.clock, blobs=old.payloads.blobs)

    async def start(self, flow: str, value: Any = None, **kwargs: Any) -> ExecutionResult:
        """Start a flow and run it until it blocks."""
        return await self.runtime.start(flow, value, **kwargs)

    async def skip(self, duration: timedelta | float) -> list[ExecutionResult]:
        """Move the clock and run every execution whose timer fell due."""
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        self.clock.now += seconds
        results: list[ExecutionResult] = []
        for row in await self.store.list("suspended", due_before=self.clock.now):
            package = ExecutionPackage(execution_id=row.execution_id, reason="timer")
            results.append(await self.runtime.execute(package))
        return results

    async def history(self, execution_id: str) -> list[ev.Event]:
        """The execution's events."""
        return await self.store.read(execution_id)

    async def types(self, execution_id: str) -> list[str]:
        """The execution's event types, in order."""
        return [e.type for e in await self.history(execution_id)]


EnvFactory = Callable[..., Env]


@pytest.fixture
async def make_env(tmp_path: Path) -> AsyncIterator[EnvFactory]:
    """Build envs on fresh SQLite files under ``tmp_path``; closes them afterwards."""
    made: list[Env] = []

    def factory(app: Loom, **options: Any) -> Env:
        where = tmp_path / f"env{len(made)}"
        where.mkdir()
        env = Env(app, where, **options)
        made.append(env)
        return env

    yield factory
    for env in made:
        await env.store.aclose()
