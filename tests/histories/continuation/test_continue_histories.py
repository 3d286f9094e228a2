"""Golden histories of continue-as-new with a step in flight in another task.

``rollover.json``: run 1 continued while its ``slow`` step was running; the step is
abandoned (its intent is in the ended run, its outcome nowhere) and run 2 completes.
``rollover_refused.json``: the same flow on an engine that refused such a continue
(``continue_in_flight``); the pre-deploy check must not report it as a divergence.
"""

from __future__ import annotations

import json
from pathlib import Path

from loom import events as ev
from loom.events import EVENTS_ADAPTER, Event
from loom.kernel.fold import fold
from loom.ops.replay_check import check_execution
from loom.runtime import Runtime
from loom.store.base import ExecutionSummary
from loom.store.memory import InMemoryEventStore
from loom.testing import replay
from tests.histories.continuation.app import app

HERE = Path(__file__).parent


def load(name: str) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads((HERE / f"{name}.json").read_text()))


def test_the_abandoned_step_has_its_intent_in_the_ended_run_and_no_outcome() -> None:
    events = load("rollover")
    cont = next(e.seq for e in events if isinstance(e, ev.ExecutionContinued))
    slow = [(e.type, e.seq < cont) for e in events if getattr(e, "effect", None) == "slow"]
    assert slow == [("EffectStarted", True)]
    assert fold(events).run == 2


async def test_the_history_replays_to_its_recorded_end() -> None:
    events = load("rollover")
    final = events[-1]
    assert isinstance(final, ev.ExecutionCompleted)
    outcome = await replay(app, events)
    assert (outcome.status, outcome.output) == ("completed", {"run": 2, "go": "yes"})


async def check(events: list[Event]) -> object:
    state = fold(events)
    summary = ExecutionSummary(
        state.execution_id, state.flow, state.status, state.last_seq, 0.0, 0.0
    )
    return await check_execution(Runtime(app, InMemoryEventStore()), summary, state)


async def test_the_pre_deploy_check_passes_both_histories() -> None:
    assert await check(load("rollover")) is None
    refused = load("rollover_refused")
    assert fold(refused).error["code"] == "continue_in_flight"  # type: ignore[index]
    assert await check(refused) is None


async def test_a_refused_run_of_other_code_still_diverges() -> None:
    """Only the continue itself is forgiven: a log whose flow did something else differs."""
    refused = load("rollover_refused")
    changed = [e for e in refused if not (isinstance(e, ev.EffectCompleted) and e.seq == 3)]
    for n, e in enumerate(changed, start=1):
        object.__setattr__(e, "seq", n)
    divergence = await check(changed)
    assert divergence is not None
