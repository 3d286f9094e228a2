"""Caller checks scoped per execution or per flow, attacked against real worker processes.

* A fork's new id is checked as a start's id is: a caller allowed only ``alice-*`` cannot fork
  ``alice-1`` into ``bob-squat``.
* ``POST /execute`` tells the check the flow the execution *is*, not the package's ``flow``
  (which the caller writes): a caller allowed one flow cannot run, or read, another's.
* Where the server chose what the check was asked about (a bulk re-drive's selection, an
  execute's stored flow), a refusal names neither the execution nor its flow; a conflicting
  start does not name the other execution's flow either.
* ``GET /versions`` is checked as ``list``, as the README says.

Checks: ``tests.security.scoped_callers`` (stand-ins for a per-tenant policy behind an ID
token, which needs Google to issue tokens). Nothing refused appends or invokes anything.
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
from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests import procs
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, WorkerFactory

pytestmark = pytest.mark.slow

APP = "tests.security.authority_app:app"


@pytest.fixture
def rt(worker_env: dict[str, str]) -> Iterator[Runtime]:
    runtime = build_runtime(APP, worker_env["LOOM_STORE"])
    yield runtime
    asyncio.run(runtime.store.aclose())


def everything(runtime: Runtime) -> dict[str, list[ev.Event]]:
    async def read() -> dict[str, list[ev.Event]]:
        rows = await runtime.list(limit=1000)
        return {r.execution_id: await runtime.history(r.execution_id) for r in rows}

    return asyncio.run(read())


def call(
    server: procs.Server, method: str, path: str, who: str, body: Any = None
) -> httpx.Response:
    headers = {**BEARER, "X-Caller": who}
    return httpx.request(
        method, f"http://{server.host}{path}", json=body, headers=headers, timeout=30
    )


def test_a_forks_new_id_is_checked_as_a_starts(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_APP=APP, LOOM_CALLER_AUTH="tests.security.scoped_callers:per_execution")
    assert asyncio.run(rt.start("sec.order", 3, execution_id="alice-1")).status == "failed"
    before, invoked = everything(rt), calls(side_dir)
    for new in ({"execution_id": "bob-squat"}, {}):  # another's id; no id (asked as "")
        answer = call(
            server, "POST", "/executions/alice-1/fork", "alice", {"from_step": "1", **new}
        )
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "forbidden"
    assert everything(rt) == before and calls(side_dir) == invoked
    own = {"from_step": "1", "execution_id": "alice-2"}
    assert call(server, "POST", "/executions/alice-1/fork", "alice", own).status_code == 200


def test_execute_is_checked_on_the_stored_flow_not_the_packages(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_APP=APP, LOOM_CALLER_AUTH="tests.security.scoped_callers:per_flow")
    asyncio.run(
        rt.start("sec.order", 9, execution_id="bob-1", capabilities={"payments"}, run=False)
    )
    before, invoked = everything(rt), calls(side_dir)
    lying = {"execution_id": "bob-1", "flow": "sec.echo", "reason": "start"}
    answer = call(server, "POST", "/execute", "alice@sec.echo", {"executionPackage": lying})
    assert answer.status_code == 403, answer.text
    missing = {**lying, "execution_id": "bob-404"}
    gone = call(server, "POST", "/execute", "alice@sec.echo", {"executionPackage": missing})
    assert gone.status_code == 403 and gone.json() == answer.json()  # existence not told
    for leaked in ("bob-1", "sec.order"):
        assert leaked not in answer.text
    assert everything(rt) == before and calls(side_dir) == invoked
    mine = {**lying, "flow": "sec.order"}
    ran = call(server, "POST", "/execute", "carol@sec.order", {"executionPackage": mine})
    assert ran.status_code == 200 and ran.json()["status"] == "completed", ran.text


def test_a_bulk_redrive_refusal_names_no_selected_execution(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_APP=APP, LOOM_CALLER_AUTH="tests.security.scoped_callers:per_flow")
    assert asyncio.run(rt.start("sec.order", 1, execution_id="secret-77")).status == "failed"
    before, invoked = everything(rt), calls(side_dir)
    answer = call(server, "POST", "/dead-letters/retry", "alice@sec.echo", {"status": "failed"})
    assert answer.status_code == 403, answer.text
    for leaked in ("secret-77", "sec.order"):
        assert leaked not in answer.text
    assert everything(rt) == before and calls(side_dir) == invoked


def test_a_conflicting_start_does_not_name_the_other_executions_flow(
    workers: WorkerFactory, rt: Runtime
) -> None:
    server = workers(LOOM_APP=APP, LOOM_CALLER_AUTH="tests.security.scoped_callers:per_flow")
    assert asyncio.run(rt.start("sec.order", 1, execution_id="shared-id")).status == "failed"
    before = everything(rt)
    body = {"flow": "sec.echo", "input": 1, "execution_id": "shared-id"}
    answer = call(server, "POST", "/executions", "alice@sec.echo", body)
    assert answer.status_code == 409 and answer.json()["code"] == "conflict", answer.text
    assert "sec.order" not in answer.text
    assert everything(rt) == before


def test_versions_is_checked_as_list(workers: WorkerFactory, tmp_path: Path) -> None:
    server = workers(LOOM_APP=APP, LOOM_CALLER_AUTH="tests.security.scoped_callers:per_action")
    assert call(server, "GET", "/versions", "lister").status_code == 200
    assert call(server, "GET", "/dead-letters?status=failed", "lister").status_code == 200
    refused = call(server, "GET", "/executions/x", "lister")
    assert refused.status_code == 403 and json.loads(refused.text)["code"] == "forbidden"
