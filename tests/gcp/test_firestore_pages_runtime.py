"""The runtime on the Firestore page layout, on the emulator: a resume or a cancel landing
between a batched session's durable points (while it holds unforced events), and an
execution of the previous layout (one document per event) resumed, forked, listed, browsed,
shown and purged by the new store.

The interloping runtime hands its executions to a recording dispatcher (a fake: in the
cloud that is Cloud Tasks) so the only session running the flow is the one under test.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from loom import EffectContext, FlowContext, Loom
from loom.dispatch.base import Dispatcher
from loom.errors import AppendConflictError
from loom.events import (
    EffectCompleted,
    Event,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionStarted,
)
from loom.kernel.fold import fold
from loom.runtime import Runtime
from loom.store import AppendRequest, StatusChange
from loom.store.browse import BrowseQuery
from loom.wire import ExecutionPackage
from loom_gcp._firestore_docs import event_doc_id, event_fields, new_execution_fields
from loom_gcp.firestore import FirestoreEventStore
from tests import procs
from tests.functions.conftest import start_worker
from tests.gcp.firestore_helpers import PROJECT

pytestmark = pytest.mark.slow
BIG = 300_000  # bytes of hex per step output: three outputs pass a 1 MiB page


class Recording(Dispatcher):
    """Keeps what it is handed; runs nothing."""

    def __init__(self) -> None:
        self.packages: list[ExecutionPackage] = []

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, *, not_before: float | None = None
    ) -> None:
        self.packages.append(package)


def count_conflicts(store: FirestoreEventStore) -> list[int]:
    """Record the ``expected_seq`` of every append of ``store`` that conflicted."""
    real = store.append
    seen: list[int] = []

    async def append(request: AppendRequest) -> int:
        try:
            return await real(request)
        except AppendConflictError:
            seen.append(request.expected_seq)
            raise

    store.append = append  # type: ignore[method-assign]
    return seen


async def split_commits(database: str, eid: str) -> int:
    """How many commits wrote more than one page (pages created at the same time)."""
    client = firestore.AsyncClient(project=PROJECT, database=database)
    try:
        events: Any = client.collection("executions").document(eid).collection("events")
        times = [d.create_time async for d in events.stream()]
    finally:
        await client._firestore_api.transport.close()  # pyright: ignore[reportPrivateUsage]
    return sum(1 for t in set(times) if times.count(t) > 1)


async def agree(readers: list[FirestoreEventStore], eid: str) -> list[Event]:
    """Every reader loads and reads (after every seq) the same gap-free log; returns it."""
    log = await readers[0].read(eid)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    for reader in readers:
        loaded = await reader.load(eid)
        assert loaded.events == log[loaded.snapshot.seq if loaded.snapshot else 0 :]
        for after in range(len(log) + 1):
            assert await reader.read(eid, after) == log[after:]
    return log


def gated_app(hook: list[Any]) -> Loom:
    """A batched flow: two big idempotent steps around an interloper (unforced), a gate,
    then a non-idempotent step (a durable point)."""
    app = Loom("pages", durability="batched")

    @app.effect("big")
    async def big(ctx: EffectContext, n: int) -> str:
        return f"{n}:" + secrets.token_hex(BIG)

    @app.effect("interloper")
    async def interloper(ctx: EffectContext, _: None) -> None:
        await hook[0](ctx.execution_id)

    @app.effect("once", idempotent=False)
    async def once(ctx: EffectContext, n: int) -> int:
        return n

    @app.flow("gated")
    async def gated(ctx: FlowContext, _: None) -> int:
        a = await ctx.execute("big", 1)
        await ctx.execute("interloper", None)
        b = await ctx.execute("big", 2)
        c = await ctx.execute("big", 3)
        got = await (ctx.recv("go") if hook[1:] == ["message"] else ctx.suspend("go", "k"))
        return len(a + b + c) + await ctx.execute("once", got)

    return app


@pytest.mark.parametrize("how", ["resume", "message"])
async def test_a_resume_or_message_between_durable_points_is_merged_on_pages(
    stores: list[FirestoreEventStore], database: str, how: str
) -> None:
    mine, theirs, fresh = stores
    hook: list[Any] = []
    app = gated_app(hook)
    other = Runtime(app, theirs, dispatcher=Recording())

    async def interlope(eid: str) -> None:  # early: buffered for the gate or the recv
        if how == "resume":
            await other.resume(eid, "go", "k", 7)
        else:
            await other.send(eid, "go", 7)

    hook.extend([interlope, how])
    runtime = Runtime(app, mine, blob_threshold=10_000_000, snapshot_min_tail=2)
    conflicts = count_conflicts(mine)
    result = await runtime.start("gated", None)
    assert conflicts  # the durable point met the resume
    assert await split_commits(database, result.execution_id) >= 1
    assert result.status == "completed"
    assert result.output == 3 * (2 + 2 * BIG) + 7
    log = await agree(stores, result.execution_id)
    types = [e.type for e in log]
    assert types.count("MessageReceived" if how == "message" else "ExecutionResumed") == 1
    assert types.count("EffectCompleted") == 5  # each step once: nothing renumbered twice
    assert types[-1] == "ExecutionCompleted"
    assert (await fresh.summary(result.execution_id)).last_seq == len(log)


async def test_a_cancel_between_durable_points_stops_the_session_on_pages(
    stores: list[FirestoreEventStore],
) -> None:
    mine, theirs, _ = stores
    hook: list[Any] = []
    app = gated_app(hook)
    other = Runtime(app, theirs, dispatcher=Recording())

    async def cancel(eid: str) -> None:
        await other.cancel(eid, "enough")

    hook.append(cancel)
    runtime = Runtime(app, mine, blob_threshold=10_000_000)
    conflicts = count_conflicts(mine)
    first = await runtime.start("gated", None)
    assert conflicts  # the durable point met the cancel
    done = first
    if first.status not in ("cancelled", "completed", "failed"):
        done = await runtime.execute(ExecutionPackage(execution_id=first.execution_id))
    assert done.status == "cancelled"
    log = await agree(stores, first.execution_id)
    assert [e.type for e in log].count("CancelRequested") == 1
    assert "ExecutionResumed" not in [e.type for e in log]


# -- an execution of the previous layout ---------------------------------------------------


async def write_legacy(client: firestore.AsyncClient, events: list[Event]) -> None:
    """Events of a real run, stored as the previous release did: one document per event."""
    first = events[0]
    assert isinstance(first, ExecutionStarted)
    doc: Any = client.collection("executions").document(first.execution_id)
    state = fold(events)
    fields = new_execution_fields(first.flow, time.time() - 60)
    batch = client.batch()
    batch.create(doc, {**fields, "status": state.status, "last_seq": events[-1].seq})
    for event in events:
        ref = doc.collection("events").document(event_doc_id(event.seq))
        batch.create(ref, event_fields(event))
    await batch.commit()


async def test_a_legacy_execution_resumed_forked_listed_shown_and_purged(
    stores: list[FirestoreEventStore], database: str
) -> None:
    mine, scratch, fresh = stores
    hook: list[Any] = []
    app = gated_app(hook)

    async def nothing(eid: str) -> None:
        return None

    hook.append(nothing)
    # A real run up to the gate, copied into the previous layout under another id.
    runtime = Runtime(app, mine, blob_threshold=10_000_000)
    started = await runtime.start("gated", None)
    assert started.status == "suspended"
    run = await scratch.read(started.execution_id)
    eid = "legacy-1"
    renamed: list[Event] = [e.model_copy(update={"execution_id": eid}) for e in run[:1]]
    client = firestore.AsyncClient(project=PROJECT, database=database)
    try:
        await write_legacy(client, renamed + run[1:])
        # Upgrading a deployment gives its executions their shard (the sweep's upkeep does
        # it once when the database had executions before its shard layout was recorded).
        assert await mine.backfill_shards() == 1
        assert await mine.backfill_shards() == 0  # idempotent
        assert [e.seq for e in await fresh.read(eid)] == [e.seq for e in run]
        rows = await mine.list(status="suspended")
        assert eid in [r.execution_id for r in rows]
        browsed = await mine.browse(BrowseQuery(id_prefix="legacy"))
        assert [r.execution_id for r in browsed] == [eid]
        done = await runtime.resume(eid, "go", "k", 5)
        assert done.status == "completed" and done.output == 3 * (2 + 2 * BIG) + 5
        log = await agree(stores, eid)
        history = await runtime.history(eid)
        assert history == log
        assert (await runtime.report(fold(history))).status == "completed"
        forked = await runtime.fork(eid, from_step="4", new_id="legacy-fork")
        assert forked.status == "suspended"  # steps 1-3 copied; 4 runs again, then the gate
        redone = await runtime.resume("legacy-fork", "go", "k", 6)
        assert redone.status == "completed" and redone.output == 3 * (2 + 2 * BIG) + 6
        await agree(stores, "legacy-fork")
        report = await fresh.purge(time.time() + 60)
        assert eid in report.purged
        left: Any = client.collection("executions").document(eid).collection("events")
        assert [d.id async for d in left.stream()] == []
        created, _ = await mine.create(ExecutionStarted(execution_id=eid, flow="gated"))
        assert created
        assert [e.seq for e in (await mine.load(eid)).events] == [1]
        assert await mine.append(
            AppendRequest(eid, 1, [run[1].model_copy()], StatusChange("running"))
        )
    finally:
        await client._firestore_api.transport.close()  # pyright: ignore[reportPrivateUsage]


def test_a_served_worker_shows_a_legacy_execution(
    firestore_emulator: str, database: str, tmp_path: Path
) -> None:
    """``GET /executions/{id}`` of the served worker (functions-framework) on an execution
    the previous release wrote, one document per event: its history and where it stands."""
    eid = "legacy-2"
    events: list[Event] = [
        ExecutionStarted(execution_id=eid, flow="reserve", input="book", seq=1, at=1.0),
        ExecutionClaimed(seq=2, holder="h:1:1", until=2.0, at=1.0),
        EffectCompleted(seq=3, step_id="1", effect="x.reserve", output="held", at=1.5),
        ExecutionCompleted(seq=4, output={"held": "held"}, at=2.0),
    ]

    async def write() -> None:
        client = firestore.AsyncClient(project=PROJECT, database=database)
        try:
            await write_legacy(client, events)
        finally:
            await client._firestore_api.transport.close()  # pyright: ignore[reportPrivateUsage]

    asyncio.run(write())
    env = {
        "LOOM_APP": "tests.faults.apps:app",
        "LOOM_STORE": f"firestore://{PROJECT}/{database}",
        "FIRESTORE_EMULATOR_HOST": firestore_emulator,
    }
    server = start_worker("worker", env, tmp_path)
    try:
        shown = httpx.get(f"http://{server.host}/executions/{eid}", timeout=60)
        assert shown.status_code == 200, shown.text
        body = shown.json()
        assert [e["seq"] for e in body["history"]] == [1, 2, 3, 4]
        assert body["history"][2]["output"] == "held"
        assert body["execution"]["status"] == "completed"
        assert body["execution"]["output"] == {"held": "held"}
        brief = httpx.get(f"http://{server.host}/executions/{eid}?history=false", timeout=60)
        assert brief.status_code == 200 and brief.json()["execution"]["status"] == "completed"
    finally:
        procs.stop(server)
