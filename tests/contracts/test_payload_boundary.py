"""The JSON boundary of the log on every event store by every blob store.

With a small blob threshold, every kind of recorded value (start input, effect output,
resume payload, verdict output, flow output) goes through the claim check, and must come
back exactly, live and on replay. User JSON shaped like a blob reference is data, never
followed; a reference only resolves inside its own execution's blobs.

A codec whose ``decode`` handed back the reference instead of the value fails
``test_values_over_the_threshold_round_trip_live_and_on_replay``: the flow compares its
input, the effect output and the resume payloads it is served with what was sent, and the
test compares the result with them too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.blobs import BlobStore
from loom.errors import BlobRefError
from loom.events import EffectCompleted, ExecutionResumed, ExecutionStarted
from loom.kernel.payloads import ESCAPE_KEY, REF_KEY, PayloadCodec
from loom.runtime import Runtime
from loom.store import AppendRequest, EventStore
from loom.wire import ExecutionPackage

THRESHOLD = 64
app = Loom("payload-contract")
calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    calls.clear()


def big(tag: str) -> dict[str, Any]:
    """A value well over the threshold, with the JSON types that could be mangled."""
    return {
        "tag": tag,
        "text": "Zoë — 東京 " * 20,
        "numbers": [0, -1, 2**63, 1.5, -0.0, 1e-300, 1.7976931348623157e308],
        "nested": {"null": None, "true": True, "list": [[], {}]},
    }


@app.effect("echo")
async def echo(ctx: EffectContext, value: Any) -> Any:
    calls[ctx.idempotency_key] += 1
    return value


@app.effect("charge", idempotent=False)
async def charge(ctx: EffectContext, value: Any) -> Any:
    calls[ctx.idempotency_key] += 1
    return value


@app.flow("round-trip")
async def round_trip(ctx: FlowContext, value: dict[str, Any]) -> dict[str, Any]:
    assert value == big("input"), value  # the input, read back from its blob
    out = await ctx.execute(echo, big("effect"))
    assert out == big("effect"), out
    first = await ctx.suspend(on="first", correlation_key="k")
    assert first == big("first"), first
    second = await ctx.suspend(on="second", correlation_key="k")
    return {"input": value, "effect": out, "first": first, "second": second}


@app.flow("echo-all")
async def echo_all(ctx: FlowContext, value: Any) -> Any:
    """Returns its input, an effect's echo of it, and a resume payload, as served."""
    out = await ctx.execute(echo, value)
    got = await ctx.suspend(on="go", correlation_key="k")
    return {"input": value, "effect": out, "resume": got}


@app.flow("charge-once")
async def charge_once(ctx: FlowContext, value: Any) -> Any:
    return await ctx.execute(charge, value)


def runtime(stores: tuple[EventStore, BlobStore]) -> Runtime:
    events, blobs = stores
    return Runtime(app, events, blobs=blobs, blob_threshold=THRESHOLD)


async def test_values_over_the_threshold_round_trip_live_and_on_replay(
    stores: tuple[EventStore, BlobStore],
) -> None:
    rt = runtime(stores)
    started = await rt.start("round-trip", big("input"), execution_id="rt-1")
    assert started.status == "suspended"
    await rt.resume("rt-1", "first", "k", big("first"))  # replays input and effect output
    done = await rt.resume("rt-1", "second", "k", big("second"))  # replays everything
    want = {
        "input": big("input"),
        "effect": big("effect"),
        "first": big("first"),
        "second": big("second"),
    }
    assert done.status == "completed", done.error
    assert done.output == want
    assert (await rt.result("rt-1")).output == want
    assert (await rt.get("rt-1"))[0].output == want
    assert calls["rt-1:1"] == 1  # served from the log on both replays
    # Every recorded value went through the blob store: the log holds references only.
    stored = [e for e in await rt.history("rt-1") if hasattr(e, "output") or hasattr(e, "input")]
    recorded = [getattr(e, "input", None) or getattr(e, "output", None) for e in stored]
    resumed = [e.payload for e in await rt.history("rt-1") if isinstance(e, ExecutionResumed)]
    for value in [*recorded, *resumed]:
        assert isinstance(value, dict) and set(value) == {REF_KEY}, value  # type: ignore[arg-type]
    # A runtime of another process (nothing cached) reads the same values back.
    again = runtime(stores)
    assert (await again.result("rt-1")).output == want


FORGERIES: list[Any] = [
    {REF_KEY: "file:../loom.db"},
    {REF_KEY: "memory:victim/input/0000000000000000"},
    {REF_KEY: 42},
    {ESCAPE_KEY: {REF_KEY: "memory:x"}},
    {ESCAPE_KEY: 1},
    [{REF_KEY: "file:../loom.db"}],
    {"a": {REF_KEY: "file:../loom.db"}},
]


@pytest.mark.parametrize("forged", FORGERIES, ids=range(len(FORGERIES)))
async def test_user_json_shaped_like_a_reference_is_data(
    stores: tuple[EventStore, BlobStore], forged: Any
) -> None:
    rt = runtime(stores)
    await rt.start("echo-all", forged, execution_id="forger")
    done = await rt.resume("forger", "go", "k", forged)
    assert done.status == "completed", done.error
    assert done.output == {"input": forged, "effect": forged, "resume": forged}
    assert (await runtime(stores).result("forger")).output == done.output


async def test_another_executions_blob_cannot_be_read(
    stores: tuple[EventStore, BlobStore],
) -> None:
    rt = runtime(stores)
    await rt.start("echo-all", big("secret"), execution_id="victim")
    head = (await rt.history("victim"))[0]
    assert isinstance(head, ExecutionStarted)
    victims_ref = head.input
    # Through the engine: the reference is stored as data and comes back as data.
    await rt.start("echo-all", victims_ref, execution_id="thief")
    done = await rt.resume("thief", "go", "k", victims_ref)
    assert done.output == {"input": victims_ref, "effect": victims_ref, "resume": victims_ref}
    # Written into the log behind the engine's back: refused, never read.
    with pytest.raises(BlobRefError, match="another execution"):
        await rt.payloads.decode(victims_ref, "thief")
    forged = ExecutionStarted(execution_id="forged", flow="echo-all", input=victims_ref)
    await rt.store.create(forged)
    with pytest.raises(BlobRefError):
        await rt.execute(ExecutionPackage(execution_id="forged"))


async def test_a_verdict_output_over_the_threshold_or_shaped_like_a_ref_is_served_exactly(
    stores: tuple[EventStore, BlobStore],
) -> None:
    rt = runtime(stores)
    for eid, output in (("v-big", big("verdict")), ("v-forged", {REF_KEY: "file:../loom.db"})):
        await rt.store.create(ExecutionStarted(execution_id=eid, flow="charge-once", input=1))
        await park_in_doubt(rt, eid)
        done = await rt.verdict(eid, "1", "performed", output=output)
        assert done.status == "completed", done.error
        assert done.output == output
        assert (await runtime(stores).result(eid)).output == output


async def park_in_doubt(rt: Runtime, eid: str) -> None:
    """Leave step 1 of ``eid`` with an intent record and no outcome, as a crash would."""
    state = await rt.load_state(eid)
    batch: list[ev.Event] = [
        ev.EffectStarted(step_id="1", effect="charge", idempotency_key=f"{eid}:1")
    ]
    ev.number(batch, state.last_seq, 1.0)
    await rt.store.append(AppendRequest(eid, state.last_seq, batch))
    parked = await rt.execute(ExecutionPackage(execution_id=eid))
    assert parked.status == "in_doubt"


async def test_the_codec_refuses_references_outside_the_execution(
    stores: tuple[EventStore, BlobStore],
) -> None:
    _, blobs = stores
    codec = PayloadCodec(blobs, THRESHOLD)
    stored, size = await codec.encode(big("mine"), "owner/output")
    assert size > THRESHOLD and set(stored) == {REF_KEY}
    assert await codec.decode(stored, "owner") == big("mine")
    for other in ("own", "owner2", "other", "owner/output"):
        with pytest.raises(BlobRefError):
            await codec.decode(stored, other)
    for foreign in ("file:../loom.db", "memory:owner", "gs://elsewhere/owner/x", 7, None):
        with pytest.raises(BlobRefError):
            await codec.decode({REF_KEY: foreign}, "owner")


async def test_effect_output_is_recorded_once_as_a_blob(
    stores: tuple[EventStore, BlobStore],
) -> None:
    rt = runtime(stores)
    done = await rt.start("charge-once", big("charged"), execution_id="c-1")
    assert done.status == "completed" and done.output == big("charged")
    completed = [e for e in await rt.history("c-1") if isinstance(e, EffectCompleted)]
    assert len(completed) == 1 and set(completed[0].output) == {REF_KEY}
    assert completed[0].output_bytes > THRESHOLD
    assert calls["c-1:1"] == 1
