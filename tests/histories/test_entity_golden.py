"""Golden histories of the entity example: messages, published state, continue-as-new.

Recorded by ``python -m tests.histories.record_entity``. Replaying a log against today's
code must reach its recorded end without invoking or sending anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from examples import entity

from loom import FlowContext, Loom
from loom.errors import NondeterminismError
from loom.events import EVENTS_ADAPTER, Event, ExecutionCompleted
from loom.kernel.fold import fold
from loom.testing import replay

HERE = Path(__file__).parent / "entity"
HISTORIES = sorted(HERE.glob("*.json"))


def load(path: Path) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads(path.read_text()))


def test_the_histories_hold_every_new_event() -> None:
    assert {p.stem for p in HISTORIES} == {"account_alice", "account_bob"}
    alice, bob = load(HERE / "account_alice.json"), load(HERE / "account_bob.json")
    types = {e.type for e in alice}
    assert {"MessageReceived", "MessageSent", "EventPublished", "ExecutionContinued"} <= types
    assert [e.run for e in alice if e.type == "ExecutionContinued"] == [2, 3]
    # Each transfer alice sent reached bob once, keyed by alice's step.
    sent = [e.message_id for e in alice if e.type == "MessageSent"]
    received = [e.message_id for e in bob if e.type == "MessageReceived" and e.sender]
    assert sent == received and len(sent) == 2


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_history_replays_to_its_recorded_end(path: Path) -> None:
    events = load(path)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    final = events[-1]
    assert isinstance(final, ExecutionCompleted)
    state = fold(events)
    assert state.run == sum(e.type == "ExecutionContinued" for e in events) + 1
    outcome = await replay(entity.app, events)
    assert (outcome.status, outcome.output) == ("completed", final.output)


async def test_changed_code_fails_the_replay() -> None:
    changed = Loom("entity")

    @changed.flow("account")
    async def account(ctx: FlowContext, state: Any) -> Any:
        await ctx.send("someone", "command", {})  # where the log has set_event
        raise AssertionError("unreachable")

    with pytest.raises(NondeterminismError, match="step 1"):
        await replay(changed, load(HERE / "account_alice.json"))
