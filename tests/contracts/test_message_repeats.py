"""A reused ``message_id`` on every store: the same message again is a no-op, another
message under the same id is refused (``conflicting_message``) and nothing is written.

The runtime runs with no dispatcher, so a control call runs the receiver inline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.blobs import InMemoryBlobStore
from loom.errors import MessageConflictError
from loom.kernel.fold import fold
from loom.ops.replay_check import check_execution
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage


def make_app() -> Loom:
    app = Loom("message-repeats")

    @app.flow("inbox")
    async def inbox(ctx: FlowContext, n: int) -> list[Any]:
        return [await ctx.recv("cmd") for _ in range(n)]

    @app.flow("rolling")
    async def rolling(ctx: FlowContext, args: dict[str, Any]) -> Any:
        got = await ctx.recv("cmd")
        if args["runs"] > 1:
            await ctx.continue_as_new({"runs": args["runs"] - 1})
        return got

    @app.flow("sender")
    async def sender(ctx: FlowContext, to: str) -> str:
        try:
            await ctx.send(to, "cmd", "from the flow")
        except MessageConflictError as exc:
            return f"{exc.code}: {exc.message}"
        return "sent"

    @app.flow("careless_sender")
    async def careless_sender(ctx: FlowContext, to: str) -> str:
        await ctx.send(to, "cmd", "from the flow")
        return "sent"

    return app


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def received(rt: Runtime, eid: str) -> list[tuple[str, Any]]:
    return [(e.message_id, e.payload) for e in await rt.history(eid) if e.type == "MessageReceived"]


async def test_another_payload_under_a_used_id_is_refused_and_nothing_is_written(
    rt: Runtime,
) -> None:
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", {"amount": 5}, message_id="m-1")
    before = await rt.history("box")
    with pytest.raises(MessageConflictError) as caught:
        await rt.send("box", "cmd", {"amount": 500}, message_id="m-1")
    assert caught.value.code == "conflicting_message"
    assert "'m-1'" in caught.value.message and "'box'" in caught.value.message
    assert caught.value.details == {"execution_id": "box", "message_id": "m-1", "topic": "cmd"}
    assert await rt.history("box") == before
    done = await rt.send("box", "cmd", "second", message_id="m-2")
    assert done.output == [{"amount": 5}, "second"]


async def test_another_topic_under_a_used_id_is_refused(rt: Runtime) -> None:
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", 1, message_id="m-1")
    with pytest.raises(MessageConflictError):
        await rt.send("box", "other", 1, message_id="m-1")
    assert await received(rt, "box") == [("m-1", 1)]


@pytest.mark.parametrize(
    ("first", "again"),
    [(1, 1.0), (1, True), (1.0, True), (0, False), (0.0, -0.0), (None, 0), ("1", 1), ([1], [1.0])],
)
async def test_payloads_are_compared_as_exact_json(rt: Runtime, first: Any, again: Any) -> None:
    """``1``, ``1.0`` and ``true`` are equal in Python and three values in JSON."""
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", first, message_id="m")
    with pytest.raises(MessageConflictError):
        await rt.send("box", "cmd", again, message_id="m")
    same = await rt.send("box", "cmd", json.loads(json.dumps(first)), message_id="m")
    assert same.status == "suspended"  # the same JSON again: a duplicate, dropped
    assert len(await received(rt, "box")) == 1


async def test_the_same_message_again_is_a_no_op_whatever_its_key_order(rt: Runtime) -> None:
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", {"a": 1, "b": [True, None, 2.5]}, message_id="m")
    again = await rt.send("box", "cmd", {"b": [True, None, 2.5], "a": 1}, message_id="m")
    assert again.status == "suspended"
    assert len(await received(rt, "box")) == 1


async def test_a_repeat_after_the_message_was_taken_is_still_compared(rt: Runtime) -> None:
    await rt.start("inbox", 1, execution_id="box")
    done = await rt.send("box", "cmd", "x", message_id="m")
    assert done.status == "completed"
    again = await rt.send("box", "cmd", "x", message_id="m")  # a retry of a finished send
    assert again.status == "completed"
    with pytest.raises(MessageConflictError):
        await rt.send("box", "cmd", "y", message_id="m")


async def test_a_repeat_of_a_message_an_earlier_run_took_is_compared(rt: Runtime) -> None:
    """After continue-as-new the id keeps deduplicating without its slot: the first
    payload is read back from the log."""
    await rt.start("rolling", {"runs": 2}, execution_id="roll")
    await rt.send("roll", "cmd", "first", message_id="m")
    assert fold(await rt.history("roll")).run == 2
    with pytest.raises(MessageConflictError):
        await rt.send("roll", "cmd", "changed", message_id="m")
    again = await rt.send("roll", "cmd", "first", message_id="m")
    assert again.status == "suspended"
    assert [mid for mid, _ in await received(rt, "roll")] == ["m"]


async def test_claim_checked_payloads_are_compared_by_value(store: EventStore) -> None:
    rt = Runtime(make_app(), store, blobs=InMemoryBlobStore(), blob_threshold=64)
    await rt.start("inbox", 2, execution_id="box")
    big = {"text": "x" * 500}
    await rt.send("box", "cmd", big, message_id="m")
    assert (await received(rt, "box"))[0][1] != big  # stored as a claim check
    again = await rt.send("box", "cmd", dict(big), message_id="m")
    assert again.status == "suspended"
    with pytest.raises(MessageConflictError):
        await rt.send("box", "cmd", {"text": "y" * 500}, message_id="m")
    with pytest.raises(MessageConflictError):
        await rt.send("box", "cmd", "small", message_id="m")
    assert len(await received(rt, "box")) == 1


async def test_a_flow_send_under_a_squatted_id_fails_its_step_on_every_replay(
    rt: Runtime,
) -> None:
    """Someone sent another message under the id the sender's step will use: the step
    fails with the conflict, recorded, so a replay raises it again without delivering."""
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", "squatter", message_id="snd:1")
    done = await rt.start("sender", "box", execution_id="snd")
    assert done.status == "completed"
    assert done.output.startswith("conflicting_message: send at step 1: 'box' already holds")
    assert "'snd:1'" in done.output
    step = fold(await rt.history("snd")).steps["1"]
    assert step["status"] == "failed"
    assert step["error"]["code"] == "conflicting_message"  # type: ignore[typeddict-item]
    assert await received(rt, "box") == [("snd:1", "squatter")]
    state = await rt.load_state("snd")
    assert await check_execution(rt, await rt.require("snd"), state) is None
    again = await rt.execute(ExecutionPackage(execution_id="snd"))
    assert again.output == done.output
    assert await received(rt, "box") == [("snd:1", "squatter")]


async def test_an_uncaught_conflict_fails_the_sending_flow(rt: Runtime) -> None:
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", "squatter", message_id="cs:1")
    done = await rt.start("careless_sender", "box", execution_id="cs")
    assert done.status == "failed"
    assert done.error is not None and "'cs:1'" in json.dumps(done.error)


async def test_a_recorded_send_passes_the_replay_check(rt: Runtime) -> None:
    await rt.start("inbox", 2, execution_id="box")
    assert (await rt.start("sender", "box", execution_id="ok")).output == "sent"
    state = await rt.load_state("ok")
    assert await check_execution(rt, await rt.require("ok"), state) is None
