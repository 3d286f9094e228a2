"""The console tests' fixtures: the worker target (as deployed) serving the shop app over a
per-test SQLite store, and a runtime of this process over the same store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import functions_framework
import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests.console.seed import SHOP_REF
from tests.functions.conftest import MAIN, SECRET


@pytest.fixture
def shop_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """LOOM_* variables for a worker serving the shop on a fresh SQLite file."""
    env = {
        "LOOM_APP": SHOP_REF,
        "LOOM_STORE": f"sqlite:///{tmp_path / 'loom.db'}",
        "LOOM_RESUME_SECRET": SECRET,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("LOOM_RESUME_AUTH", "LOOM_VERDICT_AUTH", "LOOM_VERDICT_SECRET", "LOOM_BLOBS"):
        monkeypatch.delenv(key, raising=False)
    for key in ("LOOM_CALLER_AUTH", "LOOM_MAX_BODY_BYTES", "LOOM_CRASH_AT"):
        monkeypatch.delenv(key, raising=False)
    return env


@pytest.fixture
def console(shop_env: dict[str, str]) -> FlaskClient:
    """A test client of the ``worker`` target, built the way functions-framework serves it."""
    return functions_framework.create_app("worker", str(MAIN)).test_client()


@pytest.fixture
def shop(shop_env: dict[str, str]) -> Iterator[Runtime]:
    """A runtime of this test process over the worker's store (to seed and inspect)."""
    rt = build_runtime(SHOP_REF, shop_env["LOOM_STORE"])
    yield rt
    asyncio.run(rt.store.aclose())
