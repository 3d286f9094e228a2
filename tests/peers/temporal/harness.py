"""A Loom runtime on SQLite on disk with a fake clock, every execute call checked by a replay.

What ``loom.testing.LoomTestEnv`` does in memory, on the embedded store a user runs: each
execute call that ends somewhere (completed, failed, cancelled, suspended) is followed by a
replay of the whole log against the same code, which must reach the same place without
invoking anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from loom.app import Loom
from loom.blobs import LocalBlobStore
from loom.store import SqliteEventStore
from loom.testing import LoomTestEnv


class Env(LoomTestEnv):
    """``LoomTestEnv`` on one SQLite file, its blobs in a directory beside it."""

    def __init__(self, app: Loom, path: Path, **options: Any) -> None:
        options.setdefault("blobs", LocalBlobStore(path / "blobs"))
        super().__init__(app, store=SqliteEventStore(path / "loom.db"), **options)

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
