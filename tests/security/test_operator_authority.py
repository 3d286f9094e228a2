"""Authority comes from who is authenticated, never from a ``by`` in a body.

The grant policy lets ``local:*`` grant ``payments`` to ``sec.order``. The attacker holds the
shared secret (principal ``shared-secret``, who may grant nothing) and writes ``"by":
"local:eve"`` into a fork or a re-drive: the old worker matched the policy against
``"local:eve (via shared-secret)"`` and ran a new charge. Each attack runs against a real
``functions-framework`` worker process and checks that nothing was appended and nothing
invoked; the same calls by a principal the policy does allow still work, recording the body's
``by`` as a note beside that principal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom import events as ev
from loom.errors import UnknownExecutionError
from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests import procs
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, WorkerFactory

pytestmark = pytest.mark.slow

APP = "tests.security.authority_app:app"
LOCAL_GRANTS = json.dumps(
    {"grants": [{"principal": "local:*", "flow": "sec.order", "capabilities": ["payments"]}]}
)
SECRET_GRANTS = json.dumps(
    {"grants": [{"principal": "shared-secret", "flow": "sec.order", "capabilities": ["payments"]}]}
)


@pytest.fixture
def rt(worker_env: dict[str, str]) -> Iterator[Runtime]:
    """The attacked worker's store, through the authority app (to seed and inspect)."""
    runtime = build_runtime(APP, worker_env["LOOM_STORE"])
    yield runtime
    asyncio.run(runtime.store.aclose())


def exists(runtime: Runtime, eid: str) -> bool:
    try:
        asyncio.run(runtime.require(eid))
    except UnknownExecutionError:
        return False
    return True


def everything(runtime: Runtime) -> dict[str, list[ev.Event]]:
    async def read() -> dict[str, list[ev.Event]]:
        rows = await runtime.list(limit=1000)
        return {r.execution_id: await runtime.history(r.execution_id) for r in rows}

    return asyncio.run(read())


def post(server: procs.Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"http://{server.host}{path}", json=body, headers=BEARER, timeout=30)


def charged(rt: Runtime, eid: str) -> None:
    """``eid`` ran its charge, started by the process's own code with ``payments``."""
    done = asyncio.run(rt.start("sec.order", 5, execution_id=eid, capabilities={"payments"}))
    assert done.status == "completed", done


def test_a_forks_body_by_grants_nothing(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_APP=APP, LOOM_GRANTS=LOCAL_GRANTS)
    charged(rt, "g-1")
    before, invoked = everything(rt), calls(side_dir)
    for body in (
        {"from_step": "2", "execution_id": "g-fk2", "by": "local:eve"},  # the exact attack
        {"from_step": "2", "execution_id": "g-fk2", "by": "local:*"},
        {"from_step": "2", "execution_id": "g-fk2"},
        {"from_step": "2", "by": "local:eve"},  # a fresh id: the same refusal
    ):
        answer = post(server, "/executions/g-1/fork", body)
        assert answer.status_code == 403, answer.text
        error = answer.json()
        assert error["code"] == "not_permitted"
        assert error["details"]["principal"] == "shared-secret"  # who was authenticated
    assert everything(rt) == before and not exists(rt, "g-fk2")
    assert calls(side_dir) == invoked  # no new charge


def test_a_redrives_body_by_grants_nothing(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_APP=APP, LOOM_GRANTS=LOCAL_GRANTS)
    (side_dir / "bug").touch()
    failed = asyncio.run(rt.start("sec.order", 7, execution_id="g-2", capabilities={"payments"}))
    assert failed.status == "failed"
    (side_dir / "bug").unlink()
    before, invoked = everything(rt), calls(side_dir)
    for body in (
        {"status": "failed", "by": "local:eve"},  # the exact attack, in bulk
        {"status": "failed", "execution_ids": ["g-2"], "by": "local:eve"},  # named
    ):
        answer = post(server, "/dead-letters/retry", body)
        assert answer.status_code == 200, answer.text
        (item,) = answer.json()["redriven"]
        assert item["execution_id"] == "g-2" and item["status"] is None
        assert item["error"].startswith("not_permitted: 'shared-secret' may not grant payments")
    assert everything(rt) == before
    assert calls(side_dir) == invoked  # the charge was not run again


def test_the_principal_the_policy_names_may_fork_and_the_by_is_a_note(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_APP=APP, LOOM_GRANTS=SECRET_GRANTS)
    charged(rt, "g-3")
    body = {"from_step": "2", "execution_id": "g-3-fork", "by": "local:eve"}
    answer = post(server, "/executions/g-3/fork", body)
    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    first = asyncio.run(rt.history("g-3-fork"))[0]
    assert isinstance(first, ev.ExecutionStarted)
    assert (first.by, first.capabilities) == ("local:eve (via shared-secret)", ["payments"])
    assert "g-3-fork:2 sec.charge" in calls(side_dir)
