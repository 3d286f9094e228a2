"""``event_to_json`` writes exactly what pydantic's ``model_dump_json`` writes, byte for byte.

Stores keep these bytes, so the orjson path (:mod:`loom.event_json`) may never write
anything else: every event here is written both ways and compared, including the errors
and warnings pydantic gives for values it cannot or should not write. Events are built
both validated and unvalidated (as the engine builds its hot events: any value in any
field, keys missing, extra or out of order).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import uuid
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, field_serializer

from loom import events as ev
from loom.event_json import fast_json, writer_of
from loom.events import event_to_json, unvalidated

EVENT_CLASSES: list[type[Any]] = [
    cls
    for cls in vars(ev).values()
    if isinstance(cls, type) and issubclass(cls, ev._Event) and cls is not ev._Event  # pyright: ignore[reportPrivateUsage]
]


class Colour(enum.Enum):
    RED = "red"
    NUMBER = 1.5
    PAIR = (1, "two")


class Size(enum.IntEnum):
    BIG = 2


class Word(str):
    """A ``str`` subclass: pydantic and orjson may write it differently."""


@dataclasses.dataclass
class Point:
    x: int


FLOATS = [
    0.0, -0.0, 1.0, 0.1, 1e-5, 1.5e-5, 1e-4, 9.999999999999999e-05, 1e-7, 2.5e-300, 5e-324,
    1e15, 1e16, 1.5e16, 123456789012345678.0, 1e21, 1e22, 1.7976931348623157e308,
    1796084147.0725658, 2.3939937818795443e-6, math.inf, -math.inf, math.nan,
]  # fmt: skip
INTS = [0, -1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**400]
STRINGS = [
    "", "plain", 'quote " backslash \\ slash /', "\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f",
    "é 日本 😀", "\u2028\u2029\ufeff", "\ud800", "a\udc00b", "\U0010ffff",
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(INTS),
    st.floats(),
    st.sampled_from(FLOATS),
    st.text(st.characters(codec=None, categories=None)),  # surrogates included
    st.sampled_from(STRINGS),
)
odd = st.one_of(
    st.sampled_from(list(Colour)),
    st.just(Size.BIG),
    st.builds(uuid.UUID, st.uuids().map(str)),
    st.just(datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)),
    st.just(Word("sub")),
    st.just(Point(1)),
    st.just(b"bytes"),
    st.just(frozenset({1})),
    st.just(ev.ErrorInfo(message="m")),
)
keys = st.one_of(st.text(), st.sampled_from(STRINGS), st.integers(), st.just(Word("k")))
values = st.recursive(
    st.one_of(scalars, odd),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=12,
)


def written(event: Any, write: Any) -> tuple[Any, list[str]]:
    """What ``write(event)`` gives: its text or error type, and the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome: Any = write(event)
        except Exception as exc:
            outcome = type(exc)  # (a type, never equal to a text)
    return outcome, [str(w.message) for w in caught]


def pydantic_json(event: Any) -> str:
    return event.model_dump_json()


def assert_same(event: Any) -> None:
    assert written(event, event_to_json) == written(event, pydantic_json)


@st.composite
def raw_events(draw: st.DrawFn) -> Any:
    """An event built unvalidated: every field drawn from anything, sometimes a typed one."""
    cls = draw(st.sampled_from(EVENT_CLASSES))
    fields: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        if name == "type":
            fields[name] = draw(st.sampled_from([info.default, "Other", 5]))
        elif draw(st.integers(0, 9)) == 0:
            continue  # a field missing
        else:
            fields[name] = draw(values)
    if draw(st.booleans()):
        fields = dict(reversed(fields.items()))
    if draw(st.integers(0, 9)) == 0:
        fields["extra"] = draw(values)
    return unvalidated(cls, fields, set(fields))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_events())
def test_any_field_dict_is_written_as_pydantic_writes_it(event: Any) -> None:
    assert_same(event)


@settings(max_examples=300, deadline=None)
@given(
    output=values,
    at=st.one_of(st.floats(), st.sampled_from(FLOATS)),
    duration=st.one_of(st.floats(), st.sampled_from(FLOATS), st.integers(0, 3)),
    step_id=st.one_of(
        st.text(st.characters(codec=None, categories=None)), st.sampled_from(STRINGS)
    ),
    seq=st.one_of(st.integers(), st.sampled_from(INTS), st.booleans()),
)
def test_effect_completed_as_the_engine_builds_it(
    output: Any, at: float, duration: float, step_id: str, seq: int
) -> None:
    """The hot event, every field of the type the engine gives it (or a near miss)."""
    fields = {
        "schema_version": ev.SCHEMA_VERSION,
        "seq": seq,
        "at": at,
        "type": "EffectCompleted",
        "step_id": step_id,
        "effect": "noop",
        "output": output,
        "attempts": 1,
        "duration_s": duration,
        "output_bytes": 3,
    }
    assert_same(unvalidated(ev.EffectCompleted, fields, set(fields)))


@settings(max_examples=200, deadline=None)
@given(
    payload=values,
    budgets=st.dictionaries(st.text(), st.one_of(st.floats(), st.integers(), st.booleans())),
    capabilities=st.lists(st.one_of(st.text(), st.just(Word("w")))),
    parent=st.one_of(st.none(), st.dictionaries(st.text(), st.one_of(st.text(), st.integers()))),
)
def test_started_with_typed_containers(
    payload: Any, budgets: dict[str, Any], capabilities: list[Any], parent: Any
) -> None:
    event = ev.ExecutionStarted(execution_id="e", flow="f", seq=1, at=1.5)
    fields = dict(event.__dict__)
    fields.update(input=payload, budgets=budgets, capabilities=capabilities, parent=parent)
    assert_same(unvalidated(ev.ExecutionStarted, fields, set(fields)))


@pytest.mark.parametrize("value", [*FLOATS, *INTS, *STRINGS, *list(Colour), [1, (2.5, None)]])
def test_edge_values_in_validated_events(value: Any) -> None:
    for event in (
        ev.EffectCompleted(step_id="s", effect="e", output=value, duration_s=1e-5, seq=3, at=1.0),
        ev.ExecutionCompleted(output=value, seq=9, at=2.5e-7),
        ev.MessageReceived(topic="t", message_id="m", payload={"k": value}, seq=4),
    ):
        assert_same(event)


def test_the_hot_events_take_the_orjson_path() -> None:
    """The events every step writes do not fall back to pydantic (the point of the path)."""
    hot = [
        ev.EffectCompleted(step_id="1", effect="noop", output={"a": [1, 2.5]}, seq=3, at=1.5),
        ev.ExecutionClaimed(holder="h:1", until=30.5, seq=2, at=0.5),
        ev.ExecutionCompleted(output="done", seq=4, at=2.0),
        ev.EffectCompleted(step_id="2", effect="noop", output=0, seq=5, at=2.5),  # falsy values
        ev.ExecutionCompleted(output=None, seq=6, at=3.0),
        ev.ExecutionStarted(execution_id="e", flow="f", input=[1], budgets={"usd": 2.0}),
        ev.ExecutionSuspended(step_id="1", on="gate", correlation_key="k", wake_at=5.0),
    ]
    for event in hot:
        assert fast_json(event) == event.model_dump_json()
    # A model-typed field (the error of a failure) is written by pydantic: no fast path.
    assert fast_json(ev.ExecutionFailed(error=ev.ErrorInfo(message="m"))) is None


class Aliased(BaseModel):
    x: int = Field(default=1, serialization_alias="y")


class Serialized(BaseModel):
    x: float = 1.0

    @field_serializer("x")
    def _x(self, value: float) -> str:
        return f"custom {value}"


class NaNAsString(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="strings")
    x: float = math.nan


@pytest.mark.parametrize("model", [Aliased(), Serialized(), NaNAsString()])
def test_a_model_that_writes_itself_its_own_way_goes_to_pydantic(model: BaseModel) -> None:
    assert fast_json(model) is None
    assert writer_of(type(model))(model) == model.model_dump_json()
