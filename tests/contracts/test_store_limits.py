"""A write over a store's limits fails its step or execution for good, on every store that
has limits (SQLite: its configured largest event; Firestore: 1 MiB per document, 500 writes
per commit), run through the real runtime with no blob store and no offload threshold.

Memory has no limits and is not run here.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom import EffectContext, EffectFailedError, FlowContext, Loom
from loom.errors import StoreLimitError
from loom.events import DecisionRecorded
from loom.runtime import Runtime
from loom.store import EventStore, SqliteEventStore
from tests.contracts.test_entry_points import pubsub, target, written

app = Loom("limits")
OVER = 1_200_000  # characters: over 1 MiB in one event
NO_OFFLOAD = 1 << 40  # no payload goes to a blob store, so the event store's limits apply
invocations: list[str] = []


@app.effect("limits.sized")
async def sized(ctx: EffectContext, n: int) -> str:
    invocations.append(ctx.idempotency_key)
    return secrets.token_hex(n // 2)


@app.flow("limits.output")
async def output(ctx: FlowContext, n: int) -> str:
    try:
        return str(len(await ctx.execute(sized, n)))
    except EffectFailedError as exc:
        return exc.error_code


@app.flow("limits.result")
async def result(ctx: FlowContext, n: int | str) -> str:
    return "y" * n if isinstance(n, int) else n


@app.flow("limits.decisions")
async def decisions(ctx: FlowContext, n: int) -> list[str]:
    """``n`` decisions ride the next append: more than one Firestore commit can hold."""
    ids = [ctx.uuid() for _ in range(n)]
    await ctx.execute(sized, 4)
    return [ids[0], ids[-1]]


@pytest.fixture(params=["sqlite", pytest.param("firestore", marks=pytest.mark.slow)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    if request.param == "sqlite":
        s: EventStore = SqliteEventStore(tmp_path / "loom.db", max_event_bytes=1_048_576)
    else:
        s = await request.getfixturevalue("firestore_store_factory")()
    invocations.clear()
    yield s
    await s.aclose()


async def test_an_output_over_the_limit_fails_the_step_once(store: EventStore) -> None:
    rt = Runtime(app, store, blob_threshold=NO_OFFLOAD)
    done = await rt.start("limits.output", OVER, execution_id="o-1")
    assert (done.status, done.output) == ("completed", "store_limit")
    again = await rt.start("limits.output", OVER, execution_id="o-1")
    assert (again.status, again.output) == ("completed", "store_limit")
    assert invocations == ["o-1:1"]
    types = [e.type for e in await rt.history("o-1")]
    assert "EffectFailed" in types and "EffectCompleted" not in types


async def test_a_result_over_the_limit_fails_the_execution(store: EventStore) -> None:
    rt = Runtime(app, store, blob_threshold=NO_OFFLOAD)
    done = await rt.start("limits.result", OVER, execution_id="r-1")
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "store_limit", done.error


async def test_a_start_input_over_the_limit_is_refused_whole(store: EventStore) -> None:
    rt = Runtime(app, store, blob_threshold=NO_OFFLOAD)
    with pytest.raises(StoreLimitError) as info:
        await rt.start("limits.result", "z" * OVER, execution_id="s-1")
    assert info.value.details["size"] > info.value.details["max"]
    assert await store.list() == []


async def test_any_number_of_decisions_before_an_append(store: EventStore) -> None:
    rt = Runtime(app, store, blob_threshold=NO_OFFLOAD)
    done = await rt.start("limits.decisions", 1200, execution_id="d-1")
    assert done.status == "completed", done
    history = await rt.history("d-1")
    made = [e.value for e in history if isinstance(e, DecisionRecorded)]
    assert len(made) == 1200 and done.output == [made[0], made[-1]]


@pytest.fixture
def limited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The functions-framework targets on a SQLite file taking events of 20 kB at most."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    for key, value in {
        "LOOM_APP": "tests.functions.apps:app",
        "LOOM_STORE": url,
        "LOOM_SQLITE_MAX_EVENT_BYTES": "20000",
        "LOOM_DISPATCH": "inline://",
        "LOOM_TEST_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("LOOM_BLOBS", raising=False)
    return url


def test_every_target_refuses_a_payload_over_the_limit_for_good(limited: str) -> None:
    big = {"pad": "z" * 30_000}
    worker = target("worker").post("/executions", json={"flow": "echo", "input": big})
    assert worker.status_code == 413, worker.data
    assert "Retry-After" not in worker.headers
    assert json.loads(worker.data)["code"] == "store_limit"
    # Pub/Sub: acknowledged (a redelivery would be refused the same way), nothing written.
    start = {"action": "start", "flow": "echo", "input": big, "execution_id": "p-1"}
    events = target("events").post("/", json=pubsub(start, "m-1"))
    assert events.status_code == 200, events.data
    assert written(limited) == []
