"""A failure to record (store, blob store) unwinds the execute call like a crash at that
point: the flow's ``except Exception`` never runs, nothing more is recorded, and the next
execute carries on from what was durably written. In process, with failing store doubles
(the real-process versions of these faults are in ``test_store_faults``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.blobs import InMemoryBlobStore
from loom.errors import StoreError, StoreUnavailableError
from loom.runtime import Runtime
from loom.store import InMemoryEventStore
from loom.store.base import AppendRequest
from loom.wire import ExecutionPackage

app = Loom("unwind")
CAUGHT: list[str] = []
CALLS: list[str] = []


@app.effect("fx")
async def fx(ctx: EffectContext, size: int) -> str:
    CALLS.append(ctx.idempotency_key)
    return "v" * size


@app.flow("catching")
async def catching(ctx: FlowContext, size: int) -> str:
    try:
        return await ctx.execute(fx, size)
    except Exception as exc:
        CAUGHT.append(type(exc).__name__)
        return "caught"


@app.flow("waiting")
async def waiting(ctx: FlowContext, _: None) -> Any:
    try:
        return await ctx.suspend("go", "k")
    except Exception as exc:
        CAUGHT.append(type(exc).__name__)
        return "caught"


@app.flow("replaying")
async def replaying(ctx: FlowContext, size: int) -> str:
    try:
        value = await ctx.execute(fx, size)
        await ctx.suspend("go", "k")
    except Exception as exc:
        CAUGHT.append(type(exc).__name__)
        return "caught"
    return value


class FlakyStore(InMemoryEventStore):
    """Refuses appends that ``failing`` picks, as a full disk would."""

    def __init__(self, failing: Callable[[AppendRequest], bool]) -> None:
        super().__init__()
        self.failing = failing
        self.armed = True

    async def append(self, request: AppendRequest) -> int:
        if self.armed and self.failing(request):
            raise StoreUnavailableError("disk full", details={"reason": "disk_full"})
        return await super().append(request)


class RefusingBlobs(InMemoryBlobStore):
    armed = True

    async def put(self, key: str, data: bytes) -> str:
        if self.armed:
            raise StoreError(f"writing blob {key!r} failed: No space left on device")
        return await super().put(key, data)


def _has(kind: str) -> Callable[[AppendRequest], bool]:
    return lambda request: any(e.type == kind for e in request.events)


@pytest.fixture(autouse=True)
def _clear() -> None:
    CAUGHT.clear()
    CALLS.clear()


def _package(eid: str, flow: str) -> ExecutionPackage:
    return ExecutionPackage(execution_id=eid, flow=flow, reason="start")


async def test_a_failed_outcome_append_is_never_seen_by_the_flow() -> None:
    store = FlakyStore(_has("EffectCompleted"))
    runtime = Runtime(app, store)
    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(runtime.start("catching", 3, execution_id="a"), 5)
    assert CAUGHT == [] and CALLS == ["a:1"]
    assert (await runtime.result("a")).status == "running"  # nothing ended it
    store.armed = False
    done = await runtime.execute(_package("a", "catching"))
    assert (done.status, done.output) == ("completed", "vvv")
    assert CALLS == ["a:1", "a:1"] and CAUGHT == []  # re-invoked with the same key


async def test_a_blob_store_that_refuses_the_output_unwinds_the_call() -> None:
    blobs = RefusingBlobs()
    runtime = Runtime(app, InMemoryEventStore(), blobs=blobs, blob_threshold=100)
    with pytest.raises(StoreError, match="No space"):
        await asyncio.wait_for(runtime.start("catching", 500, execution_id="b"), 5)
    assert CAUGHT == []
    types = [e.type for e in await runtime.history("b")]
    assert "EffectFailed" not in types and "ExecutionFailed" not in types, types
    blobs.armed = False
    done = await runtime.execute(_package("b", "catching"))
    assert done.status == "completed"
    assert await runtime.payloads.decode(done.output) == "v" * 500


async def test_a_missing_blob_on_replay_is_not_the_flows_to_catch() -> None:
    blobs = InMemoryBlobStore()
    runtime = Runtime(app, InMemoryEventStore(), blobs=blobs, blob_threshold=100)
    assert (await runtime.start("replaying", 500, execution_id="c")).status == "suspended"
    blobs._blobs.clear()  # pyright: ignore[reportPrivateUsage] - the step's output is lost
    with pytest.raises(StoreError):  # the resume replays step 1, whose blob is gone
        await asyncio.wait_for(runtime.resume("c", "go", "k"), 5)
    assert CAUGHT == [] and CALLS == ["c:1"]


async def test_a_failed_suspension_ends_the_call_instead_of_hanging() -> None:
    store = FlakyStore(_has("ExecutionSuspended"))
    runtime = Runtime(app, store)
    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(runtime.start("waiting", None, execution_id="w"), 5)
    assert CAUGHT == []
    store.armed = False
    assert (await runtime.execute(_package("w", "waiting"))).status == "suspended"
