"""Golden histories of updates, streams and event reads, replayed against today's code.

The ledger's log holds updates accepted, answered with a handler's step, failed in a
handler, and streamed values; the watcher's a recorded wait and two reads; the older
ledger's a flow from before it took updates. Each replays without invoking anything, the
pre-deploy replay check finds nothing, and a changed handler is caught.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import NondeterminismError
from loom.events import EVENTS_ADAPTER, Event, ExecutionCompleted
from loom.kernel.fold import fold
from loom.ops.replay_check import check_execution
from loom.runtime import Runtime
from loom.store import InMemoryEventStore
from loom.store.base import ExecutionSummary
from loom.testing import replay
from tests.histories.interactions import app as recorded

HERE = Path(__file__).parent


def load(name: str) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads((HERE / f"{name}.json").read_text()))


@pytest.mark.parametrize("name", ["ledger", "watcher"])
async def test_each_log_replays_to_its_recorded_output(name: str) -> None:
    events = load(name)
    final = events[-1]
    assert isinstance(final, ExecutionCompleted)
    outcome = await replay(recorded.app, events)
    assert (outcome.status, outcome.output) == ("completed", final.output)


@pytest.mark.parametrize("name", ["ledger", "watcher", "ledger_before_handlers"])
async def test_the_replay_check_finds_nothing(name: str) -> None:
    events = load(name)
    state = fold(events)
    summary = ExecutionSummary(
        state.execution_id, state.flow, state.status, state.last_seq, 0.0, 0.0
    )
    app = recorded.before_handlers() if name == "ledger_before_handlers" else recorded.app
    assert await check_execution(Runtime(app, InMemoryEventStore()), summary, state) is None


def test_the_ledgers_log_holds_what_the_updates_did() -> None:
    events = load("ledger")
    accepted = [e for e in events if e.type == "UpdateAccepted"]
    assert [(e.update_id, e.name, e.slot) for e in accepted][:2] == [  # type: ignore[union-attr]
        ("p-1", "post", 1),
        ("r-1", "refund", 2),
    ]
    assert accepted[0].by == "ada"  # type: ignore[union-attr]
    assert len(accepted) == 4  # the refused one left nothing
    state = fold(events)
    assert state.updates["p-1"]["status"] == "completed"
    assert state.updates["p-1"]["output"] == 20  # 10 * 1 + 5 * 2
    assert state.updates["r-1"]["status"] == "failed"
    assert state.updates["r-1"]["error"]["message"] == "refunds go through support"
    assert state.steps["u1.1"]["effect"] == "fx.rate"  # the handler's step, under its gate
    assert state.streams["entries"]["count"] == 2 and state.streams["entries"]["closed"]
    kinds = [e.type for e in load("watcher")]
    assert kinds[:4] == ["ExecutionStarted", "ExecutionClaimed", "EventAwaited", "EventRead"]


async def test_a_handler_that_calls_another_effect_fails_the_replay() -> None:
    changed = Loom("interactions")
    changed.effects.update(recorded.app.effects)

    @changed.effect("fx.other")
    async def other(ctx: Any, currency: str) -> int:
        return 1

    @changed.flow("ledger")
    async def ledger(ctx: FlowContext, opening: int) -> dict[str, Any]:
        # The recorded flow, but for the step the handler of "post" takes.
        balance = {"amount": await ctx.execute(recorded.rate, "USD") * opening}

        async def post(entry: dict[str, Any]) -> int:
            return await ctx.execute(other, entry["currency"])  # the log has fx.rate here

        ctx.set_update_handler("post", post)
        await ctx.set_event("opened", balance["amount"])
        await asyncio.Event().wait()
        return balance

    with pytest.raises(NondeterminismError, match=r"fx\.rate"):
        await asyncio.wait_for(replay(changed, load("ledger")), 30)


async def test_registering_handlers_shifts_no_step_id_of_an_older_history() -> None:
    newer = Loom("interactions")
    newer.effects.update(recorded.app.effects)

    @newer.flow("ledger")
    async def ledger(ctx: FlowContext, opening: int) -> dict[str, Any]:
        notes: list[str] = []
        ctx.set_update_handler("note", lambda text: notes.append(text))
        ctx.set_query_handler("notes", lambda: list(notes))
        amount = await ctx.execute(recorded.rate, "USD") * opening
        await ctx.set_event("opened", amount)
        await ctx.suspend("close", ctx.execution_id)
        return {"balance": amount}

    outcome = await replay(newer, load("ledger_before_handlers"))
    # Gate 3 was served as recorded: the only gate the replay opens anew is the listener's.
    assert (outcome.status, outcome.waiting_on) == ("suspended", ["u1"])
