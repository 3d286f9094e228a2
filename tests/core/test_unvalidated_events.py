"""Events the engine builds without validation are the events validation would build.

``loom.events.unvalidated`` skips the schema check for values the engine produced itself
(the completion of every step). These tests compare each such event with the one
``cls(**fields)`` builds from the same values: equal, the same fields in the same order
(the stored JSON follows that order), the same fields set, the same JSON. A field added to
the schema and forgotten on the fast path fails here.
"""

from __future__ import annotations

import pytest

# (the session imports the effects module: the runtime first)
import loom.runtime  # noqa: F401  # pyright: ignore[reportUnusedImport]
from loom.events import EVENT_ADAPTER, EffectCompleted, event_to_json, number
from loom.kernel.effects import Outcome, completed_event


@pytest.mark.parametrize("output", [5, "x", None, {"a": [1, 2.5, {"b": True}]}, [1, "2"]])
def test_completed_event_is_the_validated_event(output: object) -> None:
    outcome = Outcome(output, None, 2, 0.25)
    fast = completed_event("3.1", "charge", outcome, output, 17)
    slow = EffectCompleted(
        step_id="3.1",
        effect="charge",
        output=output,
        attempts=2,
        duration_s=0.25,
        output_bytes=17,
    )
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__) == list(EffectCompleted.model_fields)
    assert fast.model_fields_set == slow.model_fields_set
    assert repr(fast) == repr(slow)
    number([fast], 4, 1.5)
    number([slow], 4, 1.5)
    assert event_to_json(fast) == event_to_json(slow)
    assert EVENT_ADAPTER.validate_json(event_to_json(fast)) == fast


def test_completed_events_do_not_share_their_fields_set() -> None:
    outcome = Outcome(1, None, 1, 0.0)
    first, second = (completed_event(s, "e", outcome, 1, 1) for s in ("1", "2"))
    first.model_fields_set.add("seq")
    assert "seq" not in second.model_fields_set


def test_completed_event_is_frozen_like_any_event() -> None:
    event = completed_event("1", "e", Outcome(1, None, 1, 0.0), 1, 1)
    with pytest.raises(ValueError, match="frozen"):
        event.step_id = "2"  # type: ignore[misc]
