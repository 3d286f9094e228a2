"""``POST /executions/{id}/fork`` through the worker target (functions-framework's app).

A ``gated`` execution ran to its end; the fork from step 3 reuses step 1 and the gate's
payload from the copy and runs steps 3 and 4 again; authorization is a verdict-style check
(action ``fork``); a step the log does not hold is a 409 with nothing written.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from flask.testing import FlaskClient

from loom import events as ev
from loom.runtime import Runtime
from loom.workers.auth import sign
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, SECRET
from tests.functions.helpers import assert_error, history


def test_fork_over_http_reuses_the_prefix_and_needs_auth(
    client: FlaskClient, runtime: Runtime, side_dir: Path
) -> None:
    asyncio.run(runtime.start("gated", {"n": 3}, execution_id="g-1"))
    done = asyncio.run(runtime.resume("g-1", "go", "g-1:go", {"name": "ann"}))
    assert done.status == "completed"
    before = history(runtime, "g-1")
    body = json.dumps({"from_step": "3", "execution_id": "g-1b", "by": "bob"}).encode()
    assert_error(client.post("/executions/g-1/fork", data=body), 401, "unauthenticated")
    forged = {"X-Loom-Signature": sign(SECRET, "retry", "g-1", body)}  # another action's
    assert_error(client.post("/executions/g-1/fork", data=body, headers=forged), 403)
    signed = {
        "X-Loom-Signature": sign(SECRET, "fork", "g-1", body),
        "Content-Type": "application/json",
    }
    response = client.post("/executions/g-1/fork", data=body, headers=signed)
    assert response.status_code == 200, response.json
    assert response.json is not None and response.json["status"] == "completed"
    assert response.json["output"] == done.output
    ran = [line for line in calls(side_dir) if line.startswith("g-1b:")]
    assert ran == ["g-1b:3 t.greet", "g-1b:4 t.double"]  # steps 1 and 2 came from the copy
    started = history(runtime, "g-1b")[0]
    assert isinstance(started, ev.ExecutionStarted) and started.by == "bob (via shared-secret)"
    assert started.forked_from is not None and started.forked_from.execution_id == "g-1"
    assert history(runtime, "g-1") == before


def test_fork_from_a_step_the_log_does_not_hold_is_a_conflict(
    client: FlaskClient, runtime: Runtime
) -> None:
    asyncio.run(runtime.start("echo", {"n": 1}, execution_id="e-1"))
    body = json.dumps({"from_step": "7", "execution_id": "e-1b"}).encode()
    headers = {**BEARER, "Content-Type": "application/json"}
    response = client.post("/executions/e-1/fork", data=body, headers=headers)
    assert_error(response, 409, "not_forkable")
    assert_error(client.get("/executions/e-1b"), 404)
    missing = client.post("/executions/nope/fork", data=body, headers=headers)
    assert_error(missing, 404)
