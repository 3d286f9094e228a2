"""``AppendRequest`` builds through its slots' setters and stays a frozen dataclass."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from loom.events import EffectCompleted
from loom.store.base import AppendRequest, StatusChange


def _event() -> EffectCompleted:
    return EffectCompleted(step_id="s1", effect="noop", output=1, seq=4)


def test_positional_keyword_and_default_fields() -> None:
    event = _event()
    full = AppendRequest("e-1", 3, [event], StatusChange("done"), "{}", True)
    assert (full.execution_id, full.expected_seq, full.events) == ("e-1", 3, [event])
    assert (full.status, full.snapshot, full.fence) == (StatusChange("done"), "{}", True)
    bare = AppendRequest(execution_id="e-1", expected_seq=3, events=[event])
    assert (bare.status, bare.snapshot, bare.fence) == (None, None, False)


def test_frozen_equal_hashable_replaceable_and_picklable() -> None:
    events = (_event(),)
    request = AppendRequest("e-1", 3, events, fence=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.expected_seq = 4  # type: ignore[misc]
    assert request == AppendRequest("e-1", 3, events, None, None, True)
    assert hash(request) == hash(AppendRequest("e-1", 3, events, fence=True))
    moved = dataclasses.replace(request, expected_seq=7)
    assert (moved.expected_seq, moved.fence, moved.events) == (7, True, events)
    assert pickle.loads(pickle.dumps(request)) == request
    assert repr(request).startswith("AppendRequest(execution_id='e-1', expected_seq=3,")


def test_missing_or_unknown_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        AppendRequest("e-1", 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        AppendRequest("e-1", 3, [], nope=1)  # type: ignore[call-arg]
