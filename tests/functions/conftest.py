"""Fixtures for the HTTP worker tests: an environment, a test client, real servers.

Every test gets its own SQLite file and side directory. ``client`` goes through
``functions_framework.create_app`` exactly as the ``worker`` target is deployed; ``workers``
starts the same target under ``functions-framework`` on loopback (one PID each, stopped in
the finalizer).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import functions_framework
import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests import procs

REPO = Path(__file__).resolve().parents[2]
MAIN = REPO / "functions" / "main.py"
APP_REF = "tests.functions.apps:app"
SECRET = "test-secret-0123456789"
BEARER = {"Authorization": f"Bearer {SECRET}"}


@pytest.fixture
def side_dir(tmp_path: Path) -> Path:
    """Where the test app's effects record their invocations."""
    where = tmp_path / "side"
    where.mkdir()
    return where


@pytest.fixture
def worker_env(tmp_path: Path, side_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """LOOM_* variables for a worker on a fresh SQLite file (also set in this process)."""
    env = {
        "LOOM_APP": APP_REF,
        "LOOM_STORE": f"sqlite:///{tmp_path / 'loom.db'}",
        "LOOM_RESUME_SECRET": SECRET,
        "LOOM_TEST_DIR": str(side_dir),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in (
        "LOOM_RESUME_AUTH",
        "LOOM_VERDICT_AUTH",
        "LOOM_VERDICT_SECRET",
        "LOOM_MAX_BODY_BYTES",
        "LOOM_BLOBS",
        "LOOM_CRASH_AT",
    ):
        monkeypatch.delenv(key, raising=False)
    return env


@pytest.fixture
def client(worker_env: dict[str, str]) -> FlaskClient:
    """A test client of the ``worker`` target, built the way functions-framework serves it."""
    return functions_framework.create_app("worker", str(MAIN)).test_client()


@pytest.fixture
def runtime(worker_env: dict[str, str]) -> Iterator[Runtime]:
    """A runtime of this test process over the worker's store (to seed and inspect)."""
    rt = build_runtime(APP_REF, worker_env["LOOM_STORE"])
    yield rt
    asyncio.run(rt.store.aclose())


WorkerFactory = Callable[..., procs.Server]


def start_worker(name: str, env: dict[str, str], log_dir: Path) -> procs.Server:
    """``functions-framework --target worker`` on a free loopback port, ready on ``/health``."""
    port = procs.free_port()
    argv = [
        sys.executable,
        "-m",
        "functions_framework",
        "--source",
        str(MAIN),
        "--target",
        "worker",
        "--host",
        procs.LOOPBACK,
        "--port",
        str(port),
    ]
    env = {**procs.OFFLINE_ENV, "PYTHONPATH": str(REPO), "THREADS": "8", **env}
    server = procs.start(name, argv, port=port, log_path=log_dir / f"{name}.log", env=env)
    try:
        procs.wait_http_ready(server, "/health", timeout=30)
    except RuntimeError:
        procs.stop(server)
        raise
    return server


@pytest.fixture
def workers(tmp_path: Path, worker_env: dict[str, str]) -> Iterator[WorkerFactory]:
    """Start worker processes on this test's store; all stopped (by PID) afterwards.

    Call it as ``workers(name="worker", **extra_env)``.
    """
    started: list[procs.Server] = []

    def start(name: str = "worker", **extra_env: str) -> procs.Server:
        server = start_worker(name, {**worker_env, **extra_env}, tmp_path)
        started.append(server)
        return server

    yield start
    for server in started:
        procs.stop(server)
