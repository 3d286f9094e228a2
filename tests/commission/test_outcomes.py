"""Executor outcomes are a tagged union that round-trips through JSON."""

from __future__ import annotations

import pytest

from loom.commission import (
    CaseMoved,
    CompletedLocalReasoning,
    ExecutorError,
    ExecutorOutcome,
    NeedsHumanJudgment,
    NoUsefulAction,
    ProposedAction,
    Suspended,
    parse_outcome,
)

OUTCOMES: list[ExecutorOutcome] = [
    ProposedAction(action_id="software.change/1", args={"message": "m", "files": []}),
    NeedsHumanJudgment(question="which fix?", context={"options": ["a", "b"]}),
    Suspended(waiting_on="loom.execution", correlation_key="c:0:1"),
    NoUsefulAction(),
    CompletedLocalReasoning(),
    CaseMoved(revision=3),
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: o.kind)
def test_every_outcome_round_trips_through_json(outcome: ExecutorOutcome) -> None:
    data = outcome.model_dump(mode="json")
    assert data["kind"] == type(outcome).__name__
    assert parse_outcome(data) == outcome


@pytest.mark.parametrize(
    "junk",
    [None, {"kind": "Invoked"}, {"kind": "ProposedAction"}, {"action_id": "x"}, "ProposedAction"],
)
def test_anything_else_is_an_executor_error(junk: object) -> None:
    with pytest.raises(ExecutorError):
        parse_outcome(junk)
