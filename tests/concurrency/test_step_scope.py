"""Step ids are a function of the flow's own awaits only.

A store client that creates a task on every call (as gRPC's does: Firestore's client makes
one per RPC) must not take a step id from the flow whose task calls it, nor must a blob
store's: the same flow run over a store that makes tasks and over one that does not records
the same steps under the same ids, and a replay numbers them the same.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.blobs import InMemoryBlobStore
from loom.events import Event
from loom.ops.replay_check import ReplayChecker
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.store.base import AppendRequest, LoadedLog, Snapshot

TASKS_MADE: list[int] = [0]


async def _make_a_task() -> None:
    """What a gRPC client does on each call: a task of its own, in the caller's context."""
    TASKS_MADE[0] += 1
    await asyncio.ensure_future(asyncio.sleep(0))


class TaskMakingStore(SqliteEventStore):
    """SQLite, making a task on every call (see the module docstring)."""

    async def append(self, request: AppendRequest) -> int:
        await _make_a_task()
        return await super().append(request)

    async def load(self, execution_id: str) -> LoadedLog:
        await _make_a_task()
        return await super().load(execution_id)

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        await _make_a_task()
        return await super().read(execution_id, after_seq)

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        await _make_a_task()
        await super().save_snapshot(execution_id, snapshot)


class TaskMakingBlobs(InMemoryBlobStore):
    async def put(self, key: str, data: bytes) -> str:
        await _make_a_task()
        return await super().put(key, data)

    async def get(self, ref: str) -> bytes:
        await _make_a_task()
        return await super().get(ref)


def make_app() -> Loom:
    app = Loom("scoped")

    @app.effect("double")
    async def double(ctx: EffectContext, n: int) -> int:
        return n * 2

    @app.effect("big")
    async def big(ctx: EffectContext, n: int) -> str:
        return "x" * 4096 * n  # over the blob threshold: written to the blob store

    @app.flow("child")
    async def child(ctx: FlowContext, n: int) -> int:
        return await ctx.execute(double, n)

    @app.flow("inbox")
    async def inbox(ctx: FlowContext, _: None) -> Any:
        return await ctx.recv("note")

    @app.flow("busy")
    async def busy(ctx: FlowContext, n: int) -> dict[str, Any]:
        total = 0
        for i in range(n):
            total += await ctx.execute(double, i)
            await ctx.set_event("total", total)
        ctx.now()
        pair = await asyncio.gather(ctx.execute(double, 1), ctx.execute(double, 2))
        text = await ctx.execute(big, 1)
        kid = await ctx.execute_flow("child", 5)
        await ctx.send(f"{ctx.execution_id}-inbox", "note", total)
        return {"total": total, "pair": pair, "big": len(text), "kid": kid}

    return app


async def _run(
    store: SqliteEventStore, blobs: InMemoryBlobStore
) -> tuple[list[tuple[str, str]], list[Any]]:
    rt = Runtime(make_app(), store, blobs=blobs, blob_threshold=1024, snapshot_every=2)
    await rt.start("inbox", None, execution_id="s-inbox")
    done = await rt.start("busy", 6, execution_id="s")
    assert done.status == "completed", done.error
    assert (await rt.result("s-inbox")).output == 30
    steps: list[tuple[str, str]] = []
    for event in await rt.history("s"):
        step_id = getattr(event, "step_id", None)
        if step_id is not None:
            steps.append((event.type, step_id))
    checker = ReplayChecker(make_app(), store, blobs=blobs)
    checked = await checker.check(await store.list(limit=10))
    return steps, [c.divergence for c in checked]


async def test_tasks_a_store_makes_take_no_step_ids(tmp_path: Path):
    TASKS_MADE[0] = 0
    plain, _ = await _run(SqliteEventStore(tmp_path / "plain.db"), InMemoryBlobStore())
    assert TASKS_MADE[0] == 0
    busy, diverged = await _run(TaskMakingStore(tmp_path / "busy.db"), TaskMakingBlobs())
    assert TASKS_MADE[0] > 20  # the store and blob store made tasks all along
    assert busy == plain
    assert diverged == [None, None, None]  # and the replay check numbers them alike
    completed = [step_id for kind, step_id in plain if kind == "EffectCompleted"]
    assert completed[:2] == ["1", "3"]  # each loop turn: a step, then its published value
