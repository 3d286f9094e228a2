"""Verdicts bind the in-doubt episode they settle; signatures bind action, body and expiry.

Every attack runs against a real worker process (functions-framework on loopback). A refused
request answers a clear 4xx and appends nothing; a captured verdict never settles a later
episode of the same step, so an effect the operator allowed to run once again runs once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom.events import EffectInDoubt, EffectVerdict
from loom.runtime import Runtime
from loom.workers.auth import sign
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, SECRET, WorkerFactory
from tests.functions.helpers import history, seed_in_doubt

pytestmark = pytest.mark.slow


def url(server: Any) -> str:
    return f"http://{server.host}"


def post(
    server: Any, path: str, body: Any, headers: dict[str, str] | None = None
) -> httpx.Response:
    raw = json.dumps(body).encode() if not isinstance(body, bytes) else body
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    return httpx.post(url(server) + path, content=raw, headers=hdrs, timeout=30)


def park(server: Any, eid: str) -> int:
    """Run the execution: its intent record with no outcome parks it; the episode's seq."""
    answer = post(server, "/execute", {"executionPackage": {"execution_id": eid}}).json()
    assert answer["status"] == "in_doubt", answer
    return int(answer["in_doubt"][0]["episode"])


def refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    return body


def test_a_captured_verdict_cannot_settle_the_next_episode_of_the_same_step(
    workers: WorkerFactory, runtime: Runtime, side_dir: Path
) -> None:
    """The finding: a `not_performed` verdict, replayed the next time the step was in doubt,
    invoked the effect again. Here the worker dies right after every intent record, so the
    verdict's re-invocation leaves the step in doubt a second time."""
    server = workers(LOOM_CRASH_AT="after_intent")
    seed_in_doubt(runtime, "r-1")
    first = park(server, "r-1")
    captured = {"step_id": "1", "episode": first, "verdict": "not_performed"}
    with pytest.raises(httpx.HTTPError):  # the re-invocation kills the worker process
        post(server, "/executions/r-1/verdict", captured, BEARER)
    second = park(server, "r-1")
    assert second > first
    before, invoked = history(runtime, "r-1"), calls(side_dir)

    body = refused(post(server, "/executions/r-1/verdict", captured, BEARER), 409, "stale_verdict")
    assert body["details"] == {"step_id": "1", "episode": first, "open_episode": second}
    assert history(runtime, "r-1") == before and calls(side_dir) == invoked

    # The episode the operator sees now is settled once; then it is settled for good.
    answer = {**captured, "episode": second, "verdict": "failed", "error": "gave up"}
    assert post(server, "/executions/r-1/verdict", answer, BEARER).status_code == 200
    settled = history(runtime, "r-1")
    refused(post(server, "/executions/r-1/verdict", answer, BEARER), 400, "not_in_doubt")
    assert history(runtime, "r-1") == settled
    verdicts = [e for e in settled if isinstance(e, EffectVerdict)]
    doubts = [e.seq for e in settled if isinstance(e, EffectInDoubt)]
    assert [(v.verdict, v.episode) for v in verdicts] == [
        ("not_performed", first),
        ("failed", second),
    ]
    assert doubts == [first, second]


def test_a_verdict_must_name_its_episode(workers: WorkerFactory, runtime: Runtime) -> None:
    server = workers()
    seed_in_doubt(runtime, "n-1")
    episode = park(server, "n-1")
    before = history(runtime, "n-1")
    no_episode = {"step_id": "1", "verdict": "not_performed"}
    refused(post(server, "/executions/n-1/verdict", no_episode, BEARER), 400, "invalid_request")
    guessed = {**no_episode, "episode": episode + 1}
    refused(post(server, "/executions/n-1/verdict", guessed, BEARER), 409, "stale_verdict")
    assert history(runtime, "n-1") == before


def verdict_body(episode: int, step: str = "1") -> bytes:
    value = {"step_id": step, "episode": episode, "verdict": "performed"}
    return json.dumps({**value, "output": {"charge_id": "ch_seen", "amount": 5}}).encode()


def signed(raw: bytes, action: Any, eid: str, **kw: Any) -> dict[str, str]:
    return {"X-Loom-Signature": sign(SECRET, action, eid, raw, **kw)}


def test_signatures_are_checked_on_the_verdict_route(
    workers: WorkerFactory, runtime: Runtime, side_dir: Path
) -> None:
    """No signature for another action, execution, body, step, or time is a verdict."""
    server = workers()
    seed_in_doubt(runtime, "s-1")
    episode = park(server, "s-1")
    raw = verdict_body(episode)
    before = history(runtime, "s-1")
    now = int(time.time())
    attacks = {
        "a resume signature": signed(raw, "resume", "s-1"),
        "another execution": signed(raw, "verdict", "s-2"),
        "another step": signed(verdict_body(episode, step="2"), "verdict", "s-1"),
        "another episode": signed(verdict_body(episode + 5), "verdict", "s-1"),
        "expired": signed(raw, "verdict", "s-1", expires=now - 5),
        "good for a day": signed(raw, "verdict", "s-1", expires=now + 86400),
        "no expiry": {
            "X-Loom-Signature": signed(raw, "verdict", "s-1")["X-Loom-Signature"].split(",")[1]
        },
        "expiry edited": {
            "X-Loom-Signature": "t=9999999999,"
            + signed(raw, "verdict", "s-1")["X-Loom-Signature"].split(",")[1]
        },
    }
    for name, headers in attacks.items():
        response = post(server, "/executions/s-1/verdict", raw, headers)
        assert response.status_code == 403, (name, response.text)
        assert response.json()["code"] == "forbidden", name
    assert history(runtime, "s-1") == before and calls(side_dir) == []

    ok = post(server, "/executions/s-1/verdict", raw, signed(raw, "verdict", "s-1"))
    assert ok.status_code == 200, ok.text
    verdicts = [e for e in history(runtime, "s-1") if isinstance(e, EffectVerdict)]
    assert [(v.by, v.episode) for v in verdicts] == [("shared-secret", episode)]
    # The same signed request again: the episode is settled, nothing more is appended.
    after = history(runtime, "s-1")
    again = post(server, "/executions/s-1/verdict", raw, signed(raw, "verdict", "s-1"))
    assert again.status_code == 400 and again.json()["code"] == "not_in_doubt"
    assert history(runtime, "s-1") == after


def test_a_verdict_signature_is_no_resume_and_an_expired_resume_is_refused(
    workers: WorkerFactory, runtime: Runtime
) -> None:
    server = workers()
    started = post(
        server, "/executions", {"flow": "gated", "input": {"n": 1}, "execution_id": "g-1"}
    )
    assert started.json()["status"] == "suspended", started.text
    gate = started.json()["waiting_on"][0]
    raw = json.dumps({"on": gate["on"], "correlation_key": gate["correlation_key"]}).encode()
    before = history(runtime, "g-1")
    for headers in (
        signed(raw, "verdict", "g-1"),
        signed(raw, "resume", "g-1", expires=int(time.time()) - 1),
        signed(raw, "start", "g-1"),
    ):
        refused(post(server, "/executions/g-1/resume", raw, headers), 403, "forbidden")
    assert history(runtime, "g-1") == before
    ok = post(server, "/executions/g-1/resume", raw, signed(raw, "resume", "g-1"))
    assert ok.status_code == 200, ok.text


def test_the_cli_shows_the_episode_it_settles_and_refuses_a_stale_one(
    runtime: Runtime, worker_env: dict[str, str]
) -> None:
    import asyncio
    import os
    import subprocess
    import sys

    from tests.functions.conftest import APP_REF, REPO

    seed_in_doubt(runtime, "cli-1")
    episode = asyncio.run(runtime.execute(_package("cli-1"))).in_doubt[0].episode
    assert episode is not None
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOOM_TEST_DIR": ""}

    def loom(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "loom", "--app", APP_REF, "--store", worker_env["LOOM_STORE"]]
        return subprocess.run(
            [*argv, *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    before = history(runtime, "cli-1")
    stale = loom("verdict", "cli-1", "1", "failed", "--episode", str(episode + 1))
    assert stale.returncode == 2 and "open episode is" in stale.stderr, stale.stderr
    assert history(runtime, "cli-1") == before
    done = loom("verdict", "cli-1", "1", "failed", "--error", "no")
    assert done.returncode == 0, done.stderr
    assert f"settling episode {episode} of step 1" in done.stderr
    verdicts = [e for e in history(runtime, "cli-1") if isinstance(e, EffectVerdict)]
    assert [(v.episode, v.by.startswith("local:")) for v in verdicts] == [(episode, True)]


def _package(eid: str) -> Any:
    from loom.wire import ExecutionPackage

    return ExecutionPackage(execution_id=eid)
