"""A paused or killed-and-restarted Firestore under the served HTTP worker (functions-framework).

The execution's effect is running (its ledger line written) when the fault starts; then
the effect is released, so its outcome must be recorded while Firestore is away. The worker
must answer within its store deadline with a retryable 503, never with a finished execution
and never a 500; once Firestore is back, ``POST /execute`` (as Cloud Tasks would retry it)
settles the execution as the crash matrix promises: an idempotent step re-invoked with the
same key, a non-idempotent one in doubt and never invoked twice.

Pause is SIGSTOP on the emulator's JVM (a hung backend: connections open, no answers).

Kill is SIGKILL on the JVM, then a new JVM on the same port. The emulator keeps its data in
memory, while real Firestore never loses a write it acknowledged; a restart with nothing
would test data loss, not an outage. So the data is exported before the kill and the new
JVM imports it. An export is not atomic with writes arriving meanwhile (it may hold half a
commit, or miss one the worker was told had landed), so the worker process is stopped
(SIGSTOP) while the export is taken and the emulator killed, and continued before the
effect is released: whatever the worker had sent is applied before the export or never,
exactly what a crashed and restarted Firestore would hold. The worker sees connections
refused, then a server that has every write it acknowledged.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.faults.emulator import PROJECT, Emulator
from tests.faults.test_firestore_faults import DEADLINE, SLACK, TIMEOUT
from tests.functions.apps import calls
from tests.functions.conftest import start_worker

pytestmark = pytest.mark.slow


@dataclass
class Worker:
    """A served worker: its base URL, its side-ledger directory, its database and process."""

    base: str
    side: Path
    database: str
    server: procs.Server


@pytest.fixture
def worker(emulator: Emulator, tmp_path: Path) -> Iterator[Worker]:
    """A functions-framework ``worker`` process on a fresh Firestore database."""
    side = tmp_path / "side"
    side.mkdir()
    database = f"w{uuid.uuid4().hex[:24]}"
    env = {
        "LOOM_APP": "tests.faults.apps:app",
        "LOOM_STORE": f"firestore://{PROJECT}/{database}?timeout={TIMEOUT}&deadline={DEADLINE}",
        "LOOM_TEST_DIR": str(side),
        "LOOM_CLAIM_TTL": "2",
        "FIRESTORE_EMULATOR_HOST": emulator.host,
    }
    server = start_worker("worker", env, tmp_path)
    try:
        yield Worker(f"http://{server.host}", side, database, server)
    finally:
        procs.stop(server)


def post_in_background(url: str, body: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """POST on a thread; the dict gets ``status``, ``body`` and ``answered_at``."""
    out: dict[str, Any] = {}

    def go() -> None:
        response = httpx.post(url, json=body, timeout=120)
        out.update(
            status=response.status_code,
            body=response.json(),
            retry_after=response.headers.get("Retry-After"),
            answered_at=time.monotonic(),
        )

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, out


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def execute_body(execution_id: str) -> dict[str, Any]:
    return {"executionPackage": {"execution_id": execution_id}}


def run_until_effect(w: Worker, start: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Start the execution and keep executing it until its effect runs.

    On a busy machine a cold emulator may miss the tight deadline; a start whose create
    and claim landed anyway is only reported by a repeated start, so later tries go through
    ``POST /execute``.
    """
    deadline = time.monotonic() + 120
    url, body = f"{w.base}/executions", start
    while True:
        thread, answer = post_in_background(url, body)
        wait_for(lambda a=answer: bool(calls(w.side)) or bool(a), "the effect to run", 90)
        if calls(w.side):
            return thread, answer
        assert answer["status"] != 200 or answer["body"]["status"] == "running", answer
        assert answer["status"] in (200, 409, 503), answer  # never a 500
        assert time.monotonic() < deadline, answer
        url, body = f"{w.base}/execute", execute_body(start["execution_id"])
        time.sleep(0.5)


def execute_until_settled(base: str, execution_id: str) -> dict[str, Any]:
    """``POST /execute`` as Cloud Tasks would: again after a retryable answer.

    Retryable is a 503 (the store is still away, or the worker's connection to it is still
    coming back) or a 409 for the claim the interrupted call left, until it lapses. Never
    a 500, and never a conflict loop ("log keeps changing").
    """
    deadline = time.monotonic() + 120
    while True:
        response = httpx.post(f"{base}/execute", json=execute_body(execution_id), timeout=60)
        if response.status_code == 200 and response.json()["status"] != "running":
            return response.json()
        if response.status_code == 503:
            assert response.json()["code"] == "store_unavailable", response.text
            assert int(response.headers["Retry-After"]) >= 1
        elif response.status_code == 409:
            assert "is held by" in response.json()["message"], response.text
        else:
            assert response.status_code == 200, response.text
        assert time.monotonic() < deadline, response.text
        time.sleep(0.5)


@dataclass
class Outage:
    begin: Callable[[], None]
    end: Callable[[], None]


def outage(emulator: Emulator, w: Worker, kind: str) -> Outage:
    """How to take the emulator away and bring it back (with its data, for a kill)."""
    if kind == "pause":
        return Outage(
            lambda: emulator.signal(signal.SIGSTOP), lambda: emulator.signal(signal.SIGCONT)
        )
    saved: list[Path] = []

    def kill() -> None:
        w.server.proc.send_signal(signal.SIGSTOP)  # nothing new reaches Firestore meanwhile
        try:
            time.sleep(1.0)  # what the worker had sent is applied (or never will be)
            saved.append(emulator.export(w.database))
            emulator.kill()
        finally:
            w.server.proc.send_signal(signal.SIGCONT)

    return Outage(kill, lambda: emulator.start(import_data=saved[-1]))


def through_outage(emulator: Emulator, w: Worker, start: dict[str, Any], kind: str) -> None:
    """Run into the effect, take Firestore away, release the effect, check the answers."""
    thread, answer = run_until_effect(w, start)
    restore = outage(emulator, w, kind)
    restore.begin()
    try:
        asked = time.monotonic()
        health = httpx.get(f"{w.base}/health", timeout=60)
        assert time.monotonic() - asked < DEADLINE + SLACK
        released = time.monotonic()
        (w.side / "release").touch()
        thread.join(timeout=90)
        assert answer, "the worker never answered"
        # The outcome's append fails within its deadline; the engine's unwinding may make
        # one more store call (bounded the same way) before the answer.
        assert answer["answered_at"] - released < 2 * DEADLINE + SLACK, answer
        # Never a result built on a lost write: a retryable 503, and /health says so too.
        assert answer["status"] == 503 and answer["body"]["code"] == "store_unavailable", answer
        assert int(answer["retry_after"]) >= 1, answer
        assert health.status_code == 503
    finally:
        if kind == "pause" or emulator.server is None or emulator.server.proc.poll() is not None:
            restore.end()


@pytest.mark.parametrize("kind", ["pause", "kill"])
def test_an_idempotent_step_is_reinvoked_with_its_key_after_the_outage(
    emulator: Emulator,
    worker: Worker,
    kind: str,
) -> None:
    eid = f"r-{kind}"
    through_outage(
        emulator, worker, {"flow": "reserve", "input": "seat", "execution_id": eid}, kind
    )
    result = execute_until_settled(worker.base, eid)
    assert (result["status"], result["output"]) == ("completed", {"reserved": "reserved seat"})
    ledger = calls(worker.side)
    assert len(ledger) == 2 and ledger[0] == ledger[1]  # the same key, invoked again


@pytest.mark.parametrize("kind", ["pause", "kill"])
def test_a_non_idempotent_step_goes_in_doubt_after_the_outage(
    emulator: Emulator,
    worker: Worker,
    kind: str,
) -> None:
    eid = f"c-{kind}"
    through_outage(emulator, worker, {"flow": "charge", "input": 7, "execution_id": eid}, kind)
    result = execute_until_settled(worker.base, eid)
    assert result["status"] == "in_doubt"
    assert [(d["step_id"], d["effect"]) for d in result["in_doubt"]] == [("1", "x.charge")]
    assert len(calls(worker.side)) == 1  # never charged twice


def test_a_restart_that_lost_everything_leaves_the_worker_serving(
    emulator: Emulator, worker: Worker
) -> None:
    """The emulator restarted *without* its data: a loss real Firestore never has, but the
    worker must come through it. The lost execution's one invocation is in the ledger and
    the execution answers a clear 404 (nothing to retry); the same id started again runs
    afresh (the worker's memory of the old, longer log must not refuse it), as does a new
    execution, with no 500 and no conflict loop on the way."""
    thread, answer = run_until_effect(
        worker, {"flow": "charge", "input": 3, "execution_id": "lost"}
    )
    emulator.kill()
    (worker.side / "release").touch()
    thread.join(timeout=90)
    assert answer["status"] == 503 and answer["body"]["code"] == "store_unavailable", answer
    emulator.start()
    gone = httpx.get(f"{worker.base}/executions/lost", timeout=60)
    deadline = time.monotonic() + 120
    while gone.status_code == 503 and time.monotonic() < deadline:  # reconnecting
        time.sleep(0.5)
        gone = httpx.get(f"{worker.base}/executions/lost", timeout=60)
    assert gone.status_code == 404 and gone.json()["code"] == "unknown_execution", gone.text
    assert calls(worker.side) == ["lost:1 x.charge"]
    for eid in ("lost", "fresh"):
        started = httpx.post(
            f"{worker.base}/executions",
            json={"flow": "reserve", "input": eid, "execution_id": eid},
            timeout=60,
        )
        assert started.status_code == 200, started.text
        assert started.json()["output"] == {"reserved": f"reserved {eid}"}, started.text
    assert calls(worker.side) == ["lost:1 x.charge", "lost:1 x.reserve", "fresh:1 x.reserve"]
