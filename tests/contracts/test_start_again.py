"""A start that was appended but never dispatched runs when the same start comes again.

A process dying between a start's append and its dispatch (or a dispatch that failed) leaves
an execution nobody runs. The caller retries the start (Pub/Sub redelivers, a client retries
a 503); that repeat, with the same id, flow and input, must run it: at-least-once start, on
every store (the Python API) and every entry point (the ``worker`` and ``events``
functions-framework targets, the CLI), while another input is refused and a repeat of an
execution that already ran invokes nothing again.

"Created, never run" is made with ``Runtime.start(run=False)``, which appends the start and
dispatches nothing: exactly what a death after the append leaves. One test kills a real CLI
process at that point (``LOOM_CRASH_AT=after_start``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from loom.cli import main as cli
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ExecutionConflictError, StoreUnavailableError
from loom.runtime import Runtime
from loom.store import EventStore
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.base import WorkerRuntime
from loom.workers.server import build_runtime
from tests.contracts.test_entry_points import APP, pubsub, target
from tests.functions.apps import app, calls

REPO = Path(__file__).resolve().parents[2]
VALUE = {"n": 4}
DONE = {"echo": VALUE, "doubled": 8}


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
def url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A worker environment on a fresh store of each kind that processes share."""
    if request.param == "sqlite":
        store_url = f"sqlite:///{tmp_path / 'loom.db'}"
    else:
        request.getfixturevalue("firestore_emulator")
        store_url = f"firestore://loom-test/s{uuid.uuid4().hex[:24]}"
    for key, value in {
        "LOOM_APP": APP,
        "LOOM_STORE": store_url,
        "LOOM_DISPATCH": "inline://",
        "LOOM_TEST_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("LOOM_BLOBS", "LOOM_MAX_BODY_BYTES", "LOOM_CRASH_AT"):
        monkeypatch.delenv(key, raising=False)
    yield store_url


async def _created_never_run(rt: Runtime, eid: str) -> None:
    result = await rt.start("echo", VALUE, execution_id=eid, run=False)
    assert (result.status, rt.app.flows["echo"].name) == ("running", "echo")
    assert [type(e).__name__ for e in await rt.history(eid)] == ["ExecutionStarted"]


def created_never_run(store_url: str, eid: str) -> None:
    """What a start that died between its append and its dispatch leaves behind."""

    async def go() -> None:
        rt = build_runtime(APP, store_url)
        try:
            await _created_never_run(rt, eid)
        finally:
            await rt.store.aclose()

    asyncio.run(go())


def status_of(store_url: str, eid: str) -> ExecutionResult:
    async def go() -> ExecutionResult:
        rt = build_runtime(APP, store_url)
        try:
            return await rt.result(eid)
        finally:
            await rt.store.aclose()

    return asyncio.run(go())


def ran_once(tmp_path: Path, eid: str) -> None:
    assert calls(tmp_path) == [f"{eid}:1 t.double"]


async def test_the_python_api_runs_a_created_execution_on_a_repeat(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_TEST_DIR", str(tmp_path))
    rt = Runtime(app, store)
    await _created_never_run(rt, "again-1")
    with pytest.raises(ExecutionConflictError):
        await rt.start("echo", {"n": 5}, execution_id="again-1")
    assert calls(tmp_path) == []  # another input runs nothing
    result = await rt.start("echo", VALUE, execution_id="again-1")
    assert (result.status, result.output) == ("completed", DONE)
    again = await rt.start("echo", VALUE, execution_id="again-1")
    assert (again.status, again.output) == ("completed", DONE)
    ran_once(tmp_path, "again-1")  # the repeat of a finished execution invokes nothing


async def test_a_repeat_compares_its_input_as_exact_json(store: EventStore) -> None:
    """``4``, ``4.0`` and ``true`` are one value to Python's ``==`` and three to JSON: a
    repeat with another of them is another input, refused; key order is not."""
    rt = Runtime(app, store)
    await rt.start("echo", {"n": 1, "k": [1, None]}, execution_id="exact-1", run=False)
    for other in (
        {"n": 1.0, "k": [1, None]},
        {"n": True, "k": [1, None]},
        {"n": 1, "k": [1.0, None]},
    ):
        with pytest.raises(ExecutionConflictError):
            await rt.start("echo", other, execution_id="exact-1", run=False)
    same = await rt.start("echo", {"k": [1, None], "n": 1}, execution_id="exact-1", run=False)
    assert same.execution_id == "exact-1"
    assert [type(e).__name__ for e in await rt.history("exact-1")] == ["ExecutionStarted"]


def test_the_worker_target_runs_a_created_execution_on_a_repeat(url: str, tmp_path: Path) -> None:
    created_never_run(url, "w-1")
    worker = target("worker")
    body = {"flow": "echo", "input": VALUE, "execution_id": "w-1"}
    for _ in range(2):
        response = worker.post("/executions", json=body)
        assert response.status_code == 200, response.data
        answer = json.loads(response.data)
        assert (answer["status"], answer["output"]) == ("completed", DONE), answer
    ran_once(tmp_path, "w-1")


def test_the_events_target_runs_a_created_execution_on_a_redelivery(
    url: str, tmp_path: Path
) -> None:
    created_never_run(url, "e-1")
    start = {"action": "start", "flow": "echo", "input": VALUE, "execution_id": "e-1"}
    response = target("events").post("/", json=pubsub(start, "m-1"))
    assert response.status_code == 200, response.data
    result = status_of(url, "e-1")
    assert (result.status, result.output) == ("completed", DONE)
    ran_once(tmp_path, "e-1")


def test_the_cli_runs_a_created_execution_on_a_repeat(url: str, tmp_path: Path) -> None:
    created_never_run(url, "c-1")
    args = ["--app", APP, "--store", url, "start", "echo", "--input", json.dumps(VALUE)]
    result = CliRunner().invoke(cli, [*args, "--id", "c-1"])
    assert result.exit_code == 0, result.output
    assert result.output.split()[:2] == ["c-1", "completed"], result.output
    ran_once(tmp_path, "c-1")


def test_a_cli_killed_between_the_append_and_the_dispatch(tmp_path: Path) -> None:
    """A real process death (SIGKILL) right after the start's append, then the same start."""
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    argv = [sys.executable, "-m", "loom", "--app", APP, "--store", db, "start", "echo"]
    argv += ["--input", json.dumps(VALUE), "--id", "k-1"]
    env = {**os.environ, "LOOM_TEST_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    crashed = subprocess.run(
        argv, env={**env, "LOOM_CRASH_AT": "after_start"}, capture_output=True, timeout=60
    )
    assert crashed.returncode == -9, crashed.stderr
    assert status_of(db, "k-1").status == "running" and calls(tmp_path) == []
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[:2] == ["k-1", "completed"], again.stdout
    ran_once(tmp_path, "k-1")


class _FailsOnce(WorkerRuntime):
    """Runs packages on a runtime; the first run fails as if the store went away."""

    def __init__(self) -> None:
        self.rt: Runtime | None = None
        self.failed = False

    async def allocate(self, package: ExecutionPackage) -> Any:
        return None

    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        if not self.failed:
            self.failed = True
            raise StoreUnavailableError("the store went away", details={"reason": "io"})
        assert self.rt is not None
        return await self.rt.execute(package)

    async def release(self, handle: Any) -> None:
        return None


async def test_a_dispatch_that_failed_on_the_store_is_dispatched_again(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within one process too: the in-process dispatcher does not count a failed dispatch
    as done (a stand-in worker fails the first run; the store is real)."""
    monkeypatch.setenv("LOOM_TEST_DIR", str(tmp_path))
    worker = _FailsOnce()
    rt = worker.rt = Runtime(app, store, dispatcher=InProcessDispatcher(worker))
    with pytest.raises(StoreUnavailableError):
        await rt.start("echo", VALUE, execution_id="d-1")
    result = await rt.start("echo", VALUE, execution_id="d-1")
    assert (result.status, result.output) == ("completed", DONE)
    ran_once(tmp_path, "d-1")
