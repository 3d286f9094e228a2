"""Limits an attacker cannot lift, against real worker, events-target and CLI processes.

* A flood of messages on a topic the flow never reads is refused at the run's
  ``max_messages`` (429 with ``Retry-After``), with nothing appended.
* A flow that continues as new for ever stops at its ``max_runs`` after its caller left.
* A start asking for limits above the flow's own is refused (403 ``not_permitted``) unless
  the grant policy lets its authenticated principal raise them: over HTTP, Pub/Sub and the
  CLI alike, with nothing written.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loom import events as ev
from loom.errors import UnknownExecutionError
from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests import procs
from tests.functions.conftest import BEARER, REPO, WorkerFactory
from tests.security.pubsub import signed_push, start_events

pytestmark = pytest.mark.slow

APP = "tests.security.authority_app:app"
RAISE = json.dumps(
    {"grants": [{"principal": "ops-bot", "flow": "sec.*", "limits": {"max_runs": 50}}]}
)


@pytest.fixture
def rt(worker_env: dict[str, str]) -> Iterator[Runtime]:
    runtime = build_runtime(APP, worker_env["LOOM_STORE"])
    yield runtime
    asyncio.run(runtime.store.aclose())


def exists(runtime: Runtime, eid: str) -> bool:
    try:
        asyncio.run(runtime.require(eid))
    except UnknownExecutionError:
        return False
    return True


def test_a_message_flood_is_refused_at_max_messages(workers: WorkerFactory, rt: Runtime) -> None:
    server = workers(LOOM_APP=APP)
    base = f"http://{server.host}"
    start = {"flow": "sec.deaf", "input": None, "execution_id": "flood"}
    assert httpx.post(f"{base}/executions", json=start, timeout=30).status_code == 200
    for n in range(20):
        sent = httpx.post(
            f"{base}/executions/flood/messages",
            json={"topic": "spam", "payload": "x" * 100, "message_id": f"m{n}"},
            headers=BEARER,
            timeout=30,
        )
        assert sent.status_code == 200, sent.text
    before = asyncio.run(rt.history("flood"))
    over = httpx.post(
        f"{base}/executions/flood/messages",
        json={"topic": "spam", "payload": "x"},
        headers=BEARER,
        timeout=30,
    )
    assert over.status_code == 429, over.text
    assert over.headers["Retry-After"] and over.json()["code"] == "mailbox_full"
    assert over.json()["details"] == {"limit": "max_messages", "value": 20, "used": 20}
    assert asyncio.run(rt.history("flood")) == before


def test_continue_as_new_for_ever_stops_at_max_runs(workers: WorkerFactory, rt: Runtime) -> None:
    server = workers(LOOM_APP=APP)
    start = {"flow": "sec.forever", "input": 0, "execution_id": "loop"}
    answer = httpx.post(f"http://{server.host}/executions", json=start, timeout=60)
    assert answer.status_code == 200, answer.text
    done = asyncio.run(rt.result("loop"))
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "limit_exceeded" and "max_runs=5" in done.error["message"]
    runs = [e for e in asyncio.run(rt.history("loop")) if isinstance(e, ev.ExecutionContinued)]
    assert len(runs) == 4


def test_raising_a_limit_takes_the_policys_leave_everywhere(
    workers: WorkerFactory, rt: Runtime, worker_env: dict[str, str], tmp_path: Path
) -> None:
    server = workers(LOOM_APP=APP, LOOM_GRANTS=RAISE)
    higher = {"flow": "sec.forever", "input": 0, "limits": {"max_runs": 9}}
    for eid, headers in (("h-anon", {}), ("h-secret", BEARER)):
        answer = httpx.post(
            f"http://{server.host}/executions",
            json={**higher, "execution_id": eid},
            headers=headers,
            timeout=30,
        )
        assert answer.status_code == 403, answer.text
        assert answer.json()["details"]["denied_limits"] == ["max_runs"]
        assert not exists(rt, eid)
    lower = {**higher, "limits": {"max_runs": 2}, "execution_id": "h-lower"}
    assert httpx.post(f"http://{server.host}/executions", json=lower, timeout=30).status_code == 200
    assert asyncio.run(rt.result("h-lower")).status == "failed"  # stopped at 2 runs
    # Pub/Sub: a signed start of the secret's holder asks as much: rejected, nothing written.
    events = start_events({**worker_env, "LOOM_APP": APP, "LOOM_GRANTS": RAISE}, tmp_path)
    try:
        message = {"action": "start", **higher, "execution_id": "p-high"}
        assert (
            httpx.post(f"http://{events.host}/", json=signed_push(message, "m1")).status_code == 200
        )
    finally:
        procs.stop(events)
    assert not exists(rt, "p-high")
    # The CLI's user (local:<user>) is held to the same policy.
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOOM_GRANTS": RAISE, "LOOM_TEST_DIR": ""}
    base = [sys.executable, "-m", "loom", "--app", APP, "--store", worker_env["LOOM_STORE"]]
    cli = subprocess.run(
        [*base, "start", "sec.forever", "--input", "0", "--id", "c-high", "--limit", "max_runs=9"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert cli.returncode != 0 and "may not raise max_runs" in cli.stderr, cli.stderr
    assert not exists(rt, "c-high")


def test_waiters_never_hold_every_thread(workers: WorkerFactory) -> None:
    """``THREADS=6``: four slots for requests other than the probes, two of them for waits.
    A third waiter is turned away at once (429), and other requests still run."""
    server = workers(LOOM_APP=APP, THREADS="6")
    base = f"http://{server.host}"
    start = {"flow": "sec.deaf", "input": None, "execution_id": "watched"}
    assert httpx.post(f"{base}/executions", json=start, timeout=30).status_code == 200
    url = f"{base}/executions/watched/events/never?timeout=8"
    waits = [threading.Thread(target=lambda: httpx.get(url, timeout=30)) for _ in range(2)]
    for thread in waits:
        thread.start()
    time.sleep(1.0)  # both are waiting now
    third = httpx.get(url, timeout=30)
    assert third.status_code == 429, third.text
    assert third.json()["code"] == "too_many_waiters" and third.headers["Retry-After"]
    assert httpx.get(f"{base}/executions/watched?history=false", timeout=30).status_code == 200
    assert httpx.get(f"{base}/executions/watched/events/never", timeout=30).status_code == 404
    for thread in waits:
        thread.join()
