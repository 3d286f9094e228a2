"""The probes answer whatever the store does: with the Firestore emulator paused (SIGSTOP, a
hung backend) and more requests stuck on it than the server has threads, ``/live`` still
answers 200 at once and ``/health`` 503 within its store timeout, on the ``worker`` and the
``tasks`` targets as functions-framework serves them (gunicorn, ``THREADS`` request threads).

Before, every thread waited on the store and a probe waited for a thread: ``/live`` took 18 s
to answer, and a slow liveness probe makes Cloud Run restart healthy instances in the middle
of an outage. A request past the threads kept for the probes is answered 503 ``busy`` at once
(``loom.workers.admission``). The emulator is always continued (SIGCONT) afterwards.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.faults.emulator import PROJECT, Emulator
from tests.functions.conftest import BEARER, MAIN, REPO, start_worker

pytestmark = pytest.mark.slow

THREADS = 6
HEALTH_TIMEOUT = 2.0  # the readiness bound (LOOM_HEALTH_TIMEOUT)
SLACK = 1.5  # a loaded CI machine: scheduling, a TCP connect, a log line


def target(name: str, env: dict[str, str], log_dir: Path) -> procs.Server:
    """``functions-framework --target NAME`` on loopback, ready on ``/live``."""
    if name == "worker":
        return start_worker("worker", env, log_dir)
    port = procs.free_port()
    argv = [sys.executable, "-m", "functions_framework", "--source", str(MAIN)]
    argv += ["--target", name, "--host", procs.LOOPBACK, "--port", str(port)]
    full = {**procs.OFFLINE_ENV, "PYTHONPATH": str(REPO), **env}
    server = procs.start(name, argv, port=port, log_path=log_dir / f"{name}.log", env=full)
    procs.wait_http_ready(server, "/live", timeout=30)
    return server


# A request of each target that reads the store (and so hangs with it).
STUCK = {"worker": "/executions/x/fork", "tasks": "/tasks/execute"}


@pytest.fixture(params=["worker", "tasks"])
def served(
    request: pytest.FixtureRequest, emulator: Emulator, tmp_path: Path
) -> Iterator[tuple[str, str]]:
    env = {
        "LOOM_APP": "tests.functions.apps:app",
        "LOOM_STORE": f"firestore://{PROJECT}/p{uuid.uuid4().hex[:20]}",
        "FIRESTORE_EMULATOR_HOST": emulator.host,
        "LOOM_RESUME_SECRET": "test-secret-0123456789",
        "LOOM_TEST_DIR": str(tmp_path),
        "LOOM_HEALTH_TIMEOUT": str(HEALTH_TIMEOUT),
        "THREADS": str(THREADS),
    }
    server = target(str(request.param), env, tmp_path)
    try:
        yield f"http://{server.host}", str(request.param)
    finally:
        procs.stop(server)


def timed(url: str) -> tuple[int, float]:
    asked = time.monotonic()
    answer = httpx.get(url, timeout=60)
    return answer.status_code, time.monotonic() - asked


def test_probes_answer_in_time_while_the_store_hangs(
    served: tuple[str, str], emulator: Emulator
) -> None:
    base, name = served
    assert timed(f"{base}/health")[0] == 200
    path = STUCK[name]
    body = {"from_step": "1"} if name == "worker" else {"executionPackage": {"execution_id": "x"}}
    answers: list[int] = []

    def stuck() -> None:
        try:
            answer = httpx.post(f"{base}{path}", json=body, headers=BEARER, timeout=120)
            answers.append(answer.status_code)
        except httpx.HTTPError:
            answers.append(-1)

    emulator.signal(signal.SIGSTOP)
    try:
        hangers = [threading.Thread(target=stuck, daemon=True) for _ in range(2 * THREADS)]
        for thread in hangers:
            thread.start()
        time.sleep(1.0)  # every request thread but the probes' is stuck on the store now
        for _ in range(3):
            live, took = timed(f"{base}/live")
            assert live == 200 and took < SLACK, (live, took)
            health, took = timed(f"{base}/health")
            assert health == 503 and took < HEALTH_TIMEOUT + SLACK, (health, took)
        # The requests past the free threads were turned away at once, not queued.
        assert 503 in answers, answers
    finally:
        emulator.signal(signal.SIGCONT)
    deadline = time.monotonic() + 60
    while timed(f"{base}/health")[0] != 200:
        assert time.monotonic() < deadline, "the worker never became ready again"
        time.sleep(0.5)
