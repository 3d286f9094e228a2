"""A queued start's options end to end (``loom.primitives.queue_options``), on memory, SQLite
on disk and the Firestore emulator, through admit passes as ``loom serve`` runs them:
priority orders a saturated queue, a deduplication id refuses a second start while the first
is queued or running, a delay holds no slot, a timeout counts from the dequeue, and a
worker never runs more of a queue than its ``worker_concurrency``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loom import events as ev
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import InputError, QueueDeduplicatedError, UnknownExecutionError
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.store import EventStore
from loom.workers.local import LocalWorkerRuntime
from tests.contracts.conftest import make_store
from tests.flowcontrol import options_app

STORES = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("firestore", marks=pytest.mark.slow),
]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    s = await make_store(request.param, tmp_path, request)
    yield s
    await s.aclose()


@pytest.fixture
async def runtime(store: EventStore) -> AsyncIterator[Runtime]:
    options_app.reset()
    rt = Runtime(options_app.app, store)
    rt.dispatcher = InProcessDispatcher(LocalWorkerRuntime(rt))
    yield rt
    await rt.dispatcher.aclose()


async def settled(rt: Runtime, ids: list[str], budget: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + budget
    while True:
        found = {e: (await rt.store.summary(e)).status for e in ids}
        if all(s in ("completed", "failed", "cancelled") for s in found.values()):
            return found
        assert time.monotonic() < deadline, f"not settled: {found}"
        await asyncio.sleep(0.05)


def job(name: str, seconds: float = 0.05) -> dict[str, object]:
    return {"name": name, "seconds": seconds}


async def running(rt: Runtime, name: str, seconds: float, q: QueueRef) -> asyncio.Task[object]:
    """Start ``name`` in a task of its own (an in-process start runs it inline until it
    ends), once its step has begun."""
    task = asyncio.ensure_future(rt.start("job", job(name, seconds), execution_id=name, queue=q))
    for _ in range(1000):
        if any(n == name for n, _ in options_app.STARTED):
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} never began")


async def test_a_saturated_queue_runs_the_lower_priority_first(runtime: Runtime):
    blocker = await running(runtime, "blocker", 0.5, QueueRef("one"))
    names = ["low-1", "high-1", "low-2", "high-2", "mid"]
    prio = {"low-1": 9, "low-2": 9, "high-1": 1, "high-2": 1, "mid": 5}
    for n in names:  # all enqueued while the blocker holds the one slot
        await runtime.start("job", job(n), execution_id=n, queue=QueueRef("one", priority=prio[n]))
    await settled(runtime, ["blocker", *names])
    await blocker
    order = [n for n, _ in options_app.STARTED]
    assert order == ["blocker", "high-1", "high-2", "mid", "low-1", "low-2"]


async def test_a_deduplication_id_refuses_a_second_start_while_the_first_runs(
    runtime: Runtime,
):
    q = QueueRef("dedup", deduplication_id="welcome:42")
    first = await running(runtime, "first", 0.4, q)
    with pytest.raises(QueueDeduplicatedError) as refused:
        await runtime.start("job", job("second"), execution_id="second", queue=q)
    assert refused.value.details["execution_id"] == "first"
    assert refused.value.code == "queue_deduplicated"
    with pytest.raises(UnknownExecutionError):  # nothing of the refused start was written
        await runtime.store.summary("second")
    # A repeat of the first start is the same start, not a duplicate.
    again = await runtime.start("job", job("first", 0.4), execution_id="first", queue=q)
    assert again.execution_id == "first"
    await settled(runtime, ["first"])
    await first
    await runtime.start("job", job("third"), execution_id="third", queue=q)  # free again
    assert (await settled(runtime, ["third"]))["third"] == "completed"
    other = QueueRef("one", deduplication_id="welcome:42")  # ids are per queue
    await runtime.start("job", job("elsewhere"), execution_id="elsewhere", queue=other)


async def test_a_deduplication_id_left_by_an_ended_execution_is_taken_over(runtime: Runtime):
    q = QueueRef("dedup", deduplication_id="d")
    await runtime.start("job", job("a"), execution_id="a", queue=q)
    await settled(runtime, ["a"])
    # As if the worker died between the end and giving the id up: the id still names "a".
    leases = runtime.store.leases()
    assert (await leases.deduplicate("dedup", "d", "a", runtime.clock())).holder == "a"
    await runtime.start("job", job("b"), execution_id="b", queue=q)
    assert (await settled(runtime, ["b"]))["b"] == "completed"
    # ... and "b" gave it up as it ended.
    assert (await leases.deduplicate("dedup", "d", "zz", runtime.clock())).holder == "zz"


async def test_a_delayed_start_waits_without_holding_a_slot(runtime: Runtime):
    began = time.time()
    later = QueueRef("one", delay=1.5)
    await runtime.start("job", job("later"), execution_id="later", queue=later)
    await runtime.start("job", job("now"), execution_id="now", queue=QueueRef("one"))
    assert (await runtime.store.summary("later")).status == "running"
    await settled(runtime, ["later", "now"])
    started = dict(options_app.STARTED)
    assert [n for n, _ in options_app.STARTED] == ["now", "later"]
    # The one slot was free for "now" while "later" waited: it held none.
    assert started["now"] < started["later"]
    assert started["later"] - began >= 1.5


async def test_not_before_takes_a_moment(runtime: Runtime):
    at = datetime.fromtimestamp(time.time() + 0.5, UTC)
    q = QueueRef("dedup", not_before=at)
    await runtime.start("job", job("at"), execution_id="at", queue=q)
    await settled(runtime, ["at"])
    assert options_app.STARTED[0][1] >= at.timestamp()
    first = (await runtime.history("at"))[0]
    assert isinstance(first, ev.ExecutionStarted) and first.queue_options is not None
    assert first.queue_options["not_before"] == pytest.approx(at.timestamp())


async def test_a_timeout_counts_from_the_dequeue_not_the_start(runtime: Runtime):
    blocker = await running(runtime, "blocker", 0.8, QueueRef("one"))
    started = time.time()
    await runtime.start(
        "job", job("patient", 0.05), execution_id="patient", queue=QueueRef("one", timeout=0.6)
    )
    await runtime.start("nap", 5.0, execution_id="sleepy", queue=QueueRef("one", timeout=0.5))
    found = await settled(runtime, ["blocker", "patient", "sleepy"])
    await blocker
    # "patient" waited 0.8 s in the queue, more than its timeout, and still completed.
    assert found == {"blocker": "completed", "patient": "completed", "sleepy": "cancelled"}
    dequeued = [e for e in await runtime.history("patient") if e.type == "ExecutionDequeued"]
    assert len(dequeued) == 1 and isinstance(dequeued[0], ev.ExecutionDequeued)
    assert dequeued[0].at - started >= 0.7
    assert dequeued[0].deadline == pytest.approx(dequeued[0].at + 0.6)


async def test_a_worker_runs_no_more_of_a_queue_than_its_worker_concurrency(runtime: Runtime):
    ids = [f"w{i}" for i in range(5)]
    starts = [
        runtime.start("job", job(e, 0.15), execution_id=e, queue=QueueRef("per-worker"))
        for e in ids
    ]
    await asyncio.gather(*starts)
    assert (await settled(runtime, ids)) == dict.fromkeys(ids, "completed")
    assert options_app.PEAK["all"] == 1
    options_app.reset()
    ids = [f"p{i}" for i in range(6)]
    q = QueueRef("pair-per-worker")
    await asyncio.gather(
        *(runtime.start("job", job(e, 0.15), execution_id=e, queue=q) for e in ids)
    )
    assert (await settled(runtime, ids)) == dict.fromkeys(ids, "completed")
    assert options_app.PEAK["all"] == 2


async def test_bad_options_are_refused_naming_what_was_wrong(runtime: Runtime):
    bad: list[tuple[QueueRef, str]] = [
        (QueueRef("one", priority=-1), "priority"),
        (QueueRef("one", priority=2**31), "priority"),
        (QueueRef("one", deduplication_id=""), "deduplication_id"),
        (QueueRef("one", delay=-1), "delay"),
        (QueueRef("one", delay=float("nan")), "delay"),
        (QueueRef("one", delay=1, not_before=time.time()), "not both"),
        (QueueRef("one", timeout=0), "timeout"),
        (QueueRef("one", not_before=datetime(2030, 1, 1)), "time zone"),
    ]
    for q, what in bad:
        with pytest.raises(InputError, match=what):
            await runtime.start("job", job("x"), execution_id="x", queue=q)
    with pytest.raises(UnknownExecutionError):
        await runtime.store.summary("x")


def test_the_options_reach_http_and_the_command_line(tmp_path: Path) -> None:
    """``POST /executions`` and ``loom start`` take the options (and refuse them without a
    queue, and a held deduplication id with 409 / exit 1, naming the holder)."""
    import functions_framework
    from click.testing import CliRunner

    from loom.cli import main
    from tests.functions.conftest import MAIN

    store = f"sqlite:///{tmp_path / 'loom.db'}"
    app = "tests.flowcontrol.options_app:app"
    base = ["--app", app, "--store", store, "start", "job"]
    opts = ["--queue", "dedup", "--priority", "3", "--dedup-id", "d", "--delay", "30"]
    cli = CliRunner().invoke(main, [*base, "--input", '{"name": "c"}', "--id", "c", *opts])
    assert cli.exit_code == 0, cli.output
    again = CliRunner().invoke(main, [*base, "--input", '{"name": "c2"}', "--id", "c2", *opts])
    assert again.exit_code != 0 and "'c'" in again.output and "deduplication" in again.output
    orphan = CliRunner().invoke(main, [*base, "--id", "c3", "--priority", "1"])
    assert orphan.exit_code != 0 and "needs a queue" in orphan.output
    mp = pytest.MonkeyPatch()
    mp.setenv("LOOM_APP", app)
    mp.setenv("LOOM_STORE", store)
    try:
        client = functions_framework.create_app("worker", str(MAIN)).test_client()
        body = {"flow": "job", "input": {"name": "h"}, "queue": "dedup", "deduplication_id": "d"}
        held = client.post("/executions", json={**body, "execution_id": "h"})
        assert held.status_code == 409 and held.json is not None
        assert held.json["code"] == "queue_deduplicated", held.json
        assert held.json["details"]["execution_id"] == "c"
        ok = client.post(
            "/executions",
            json={**body, "execution_id": "h", "deduplication_id": "e", "priority": 2,
                  "delay": 60, "queue_timeout": 5},
        )  # fmt: skip
        assert ok.status_code == 200, ok.json
        bad = client.post("/executions", json={"flow": "job", "priority": 1})
        assert bad.status_code == 400
    finally:
        mp.undo()
    first = asyncio.run(_first(store, "h"))
    assert first.queue_options == {"priority": 2, "dedup": "e", "not_before": pytest.approx(
        first.at + 60, abs=1), "timeout": 5.0}  # fmt: skip


async def _first(url: str, eid: str) -> ev.ExecutionStarted:
    from loom.config import open_store

    store = open_store(url)
    try:
        first = (await store.read(eid))[0]
    finally:
        await store.aclose()
    assert isinstance(first, ev.ExecutionStarted)
    return first
