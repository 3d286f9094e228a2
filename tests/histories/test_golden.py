"""Golden histories replayed as tests (like Temporal's replayer).

Each ``*.json`` here is a real log recorded by ``python -m tests.histories.record``. Replaying
it against today's code must reach the recorded end without invoking anything; a code change
that would make production logs diverge fails here first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from examples import orders

from loom import FlowContext, Loom
from loom.errors import NondeterminismError
from loom.events import EVENTS_ADAPTER, Event, ExecutionCompleted
from loom.testing import replay

HERE = Path(__file__).parent
HISTORIES = sorted(p for p in HERE.glob("*.json") if not p.stem.startswith(("race_", "timer_")))


def load(path: Path) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads(path.read_text()))


def test_the_golden_histories_are_there():
    assert {p.stem for p in HISTORIES} >= {"order_fulfil", "order_express_in_doubt"}


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_history_replays_to_its_recorded_end(path: Path):
    events = load(path)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    final = events[-1]
    assert isinstance(final, ExecutionCompleted)
    outcome = await replay(orders.app, events)
    assert outcome.status == "completed"
    assert outcome.output == final.output


async def test_the_in_doubt_history_records_the_verdict_and_who_gave_it():
    events = load(HERE / "order_express_in_doubt.json")
    types = [e.type for e in events]
    assert (
        types.index("EffectStarted") < types.index("EffectInDoubt") < types.index("EffectVerdict")
    )
    verdict = next(e for e in events if e.type == "EffectVerdict")
    assert verdict.by == "ops@example.com"


async def test_changed_code_fails_the_replay():
    swapped = Loom("orders")
    for name, effect in orders.app.effects.items():
        swapped.effects[name] = effect

    @swapped.flow("order.express")
    async def express(ctx: FlowContext, order: orders.Order) -> orders.Outcome:
        await ctx.execute(orders.send_email, "hello first")  # a step the log does not have
        raise AssertionError("unreachable")

    with pytest.raises(NondeterminismError, match="step 1"):
        await replay(swapped, load(HERE / "order_express_in_doubt.json"))
