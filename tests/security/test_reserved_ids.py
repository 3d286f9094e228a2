"""Engine-made ids cannot be squatted: every id form the engine derives is refused to an
outside start (400 ``reserved_execution_id``, nothing written), and the engine checks that an
execution holding such an id is its own before it reports on it.

The attacks of the issue, against real worker and events-target processes:

* an anonymous start of the next schedule tick's id (read from ``GET /schedules``);
* a start of ``{id}.redrive-{seq}`` (computable from the history), which made an operator's
  re-drive report success while nothing was re-driven;
* a start of ``pubsub-{messageId}``, which made the real message be dropped as a conflict;
* a start of a signed request's default id, a run's id, a child's; and the same ids as a
  fork's new id or a Pub/Sub start's ``execution_id``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom import events as ev
from loom.errors import UnknownExecutionError
from loom.ops.deadletters import failure_point, redrive_id
from loom.primitives.schedules import fire_due
from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests import procs
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, WorkerFactory
from tests.security.pubsub import push, start_events

pytestmark = pytest.mark.slow

APP = "tests.security.authority_app:app"


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


def everything(runtime: Runtime) -> dict[str, list[ev.Event]]:
    async def read() -> dict[str, list[ev.Event]]:
        rows = await runtime.list(limit=1000)
        return {r.execution_id: await runtime.history(r.execution_id) for r in rows}

    return asyncio.run(read())


async def squat(runtime: Runtime, eid: str, flow: str, value: Any, by: str = "mallory") -> None:
    """An execution under ``eid`` written to the store by someone else (as one started
    before the form was reserved would be)."""
    started = ev.ExecutionStarted(
        execution_id=eid, flow=flow, input=value, flow_version="1", at=1.0, by=by
    )
    created, _ = await runtime.store.create(started)
    assert created


def post(server: procs.Server, path: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(f"http://{server.host}{path}", json=body, timeout=30, **kw)


def test_every_engine_form_is_refused_to_an_outside_start(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    server = workers(LOOM_APP=APP)
    listed = httpx.get(f"http://{server.host}/schedules", timeout=30).json()
    tick = listed["schedules"][0]["next_execution_id"]  # public: what a squatter reads
    assert asyncio.run(rt.start("sec.order", 2, execution_id="o-1")).status == "failed"
    before, invoked = everything(rt), calls(side_dir)
    for eid in (
        tick,
        "o-1.redrive-6",
        "pubsub-17",
        "sig-" + "0" * 32,
        "o-1#run2",
        "o-1.child.3",
    ):
        for headers in ({}, BEARER):  # anonymous, and the secret's holder alike
            body = {"flow": "sec.echo", "input": {"evil": True}, "execution_id": eid}
            answer = post(server, "/executions", body, headers=headers)
            assert answer.status_code == 400, (eid, answer.text)
            assert answer.json()["code"] == "reserved_execution_id"
        fork = {"from_step": "1", "execution_id": eid}
        answer = post(server, "/executions/o-1/fork", fork, headers=BEARER)
        assert answer.status_code == 400 and answer.json()["code"] == "reserved_execution_id"
    assert everything(rt) == before and calls(side_dir) == invoked


def test_a_pubsub_message_is_not_dropped_for_a_squatted_id(
    workers: WorkerFactory, rt: Runtime, worker_env: dict[str, str], tmp_path: Path
) -> None:
    server = workers(LOOM_APP=APP)
    squat = {"flow": "sec.echo", "input": "evil", "execution_id": "pubsub-m42"}
    assert post(server, "/executions", squat).status_code == 400
    events = start_events({**worker_env, "LOOM_APP": APP}, tmp_path)
    try:
        real = {"action": "start", "flow": "sec.echo", "input": "real"}
        assert post(events, "/", push(real, "m42")).status_code == 200
        named = {**real, "execution_id": "pubsub-m43"}  # a message naming the form itself
        assert post(events, "/", push(named, "m1")).status_code == 200  # acknowledged...
    finally:
        procs.stop(events)
    assert asyncio.run(rt.result("pubsub-m42")).output == "real"
    assert not exists(rt, "pubsub-m43")  # ...and rejected: nothing written


def test_an_operators_redrive_is_not_reported_done_by_a_squatter(
    workers: WorkerFactory, rt: Runtime, side_dir: Path
) -> None:
    """The engine's check: an execution holding the re-drive's id (one started before the
    form was reserved) is not the re-drive; the operator is told, and it is left alone."""
    server = workers(LOOM_APP=APP, LOOM_GRANTS='{"grants": []}')
    assert asyncio.run(rt.start("sec.order", 2, execution_id="o-2")).status == "failed"
    held = redrive_id("o-2", failure_point(asyncio.run(rt.history("o-2")))[0])
    asyncio.run(squat(rt, held, "sec.echo", "evil"))
    before = everything(rt)
    answer = post(server, "/dead-letters/retry", {"status": "failed"}, headers=BEARER)
    assert answer.status_code == 200, answer.text
    items = {i["execution_id"]: i for i in answer.json()["redriven"]}
    item = items["o-2"]
    assert (item["action"], item["new_execution_id"], item["status"]) == ("none", held, None)
    assert item["error"].startswith("reserved_execution_id")
    assert everything(rt) == before


async def test_a_schedule_does_not_take_a_squatted_tick_as_its_own(rt: Runtime) -> None:
    """A pass finding an execution under a tick's id that the schedule did not start
    reports an error for that tick, never the squatter's status as its run."""
    schedule = rt.app.schedules["nightly"]
    at = 1_800_000_000.0 - (1_800_000_000 % 86400) + 3 * 3600 + 30  # 30 s after a tick
    from datetime import UTC, datetime

    tick = schedule.due(datetime.fromtimestamp(at, UTC))[-1]
    eid = schedule.execution_id(tick)
    await squat(rt, eid, "sec.echo", {"evil": True})
    before = await rt.history(eid)
    assert await fire_due(rt, now=at - 86400) == []  # declared (first seen) a day before
    (fired,) = await fire_due(rt, now=at)
    assert (fired.execution_id, fired.started, fired.status) == (eid, False, "error")
    assert fired.error is not None and fired.error.startswith("reserved_execution_id")
    assert await rt.history(eid) == before
    # The schedule's own run of the next tick is reported as usual.
    (own,) = await fire_due(rt, now=at + 86400)
    assert own.started and own.status == "completed"
    (again,) = await fire_due(rt, now=at + 86400 + 1)
    assert (again.started, again.status, again.error) == (False, "completed", None)
