"""An execution's timeline for the console: its events in order and each step as a bar.

Pure: built from events already read, no I/O. A recorded value stored as a claim check
(``{"$blob": ref}``) is shown as a link the page follows on demand, never read here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loom.events import Event
from loom.kernel.payloads import ESCAPE_KEY, REF_KEY
from loom.primitives.children import CHILD_GATE
from loom.workers.console.fmt import fmt_duration, fmt_time

PAYLOAD_FIELDS = ("input", "output", "payload", "value", "error")
"""Event fields shown as expandable values (and fetched on demand when a blob holds them)."""
_HIDDEN = frozenset({"type", "seq", "at", "schema_version", *PAYLOAD_FIELDS})
_TIMES = frozenset({"until", "wake_at", "not_before", "started_at", "deadline"})  # epoch s
_BAR_SCALE = 1000  # bars are drawn in an SVG 1000 units wide
_OUTCOMES = {
    "EffectCompleted": "completed",
    "EffectFailed": "failed",
    "EffectInDoubt": "in_doubt",
    "EffectVerdict": "verdict",
}


@dataclass
class Value:
    """One expandable value of an event.

    Attributes:
        name: The event field (``output``, ``error``...).
        text: The value as indented JSON ("" for a blob not fetched yet).
        blob: The claim check's reference when a blob holds the value.
    """

    name: str
    text: str
    blob: str | None = None


@dataclass
class Row:
    """One event of the timeline."""

    seq: int
    at: float
    offset: float
    type: str
    step_id: str | None
    summary: str
    values: list[Value] = field(default_factory=list[Value])
    note: str = ""


@dataclass
class Bar:
    """One step's span: from its first start to its outcome (or to now, if still open)."""

    step_id: str
    effect: str
    status: str
    start: float
    duration: float
    attempts: int
    x: int = 0
    width: int = 1


@dataclass
class Timeline:
    """What the execution page draws."""

    rows: list[Row]
    bars: list[Bar]
    start: float
    span: float


def pretty(value: Any) -> str:
    """``value`` as indented JSON (what the page shows inside ``<pre>``)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _value(name: str, raw: Any) -> Value:
    if isinstance(raw, dict) and len(raw) == 1:  # type: ignore[arg-type]
        only: dict[str, Any] = raw  # type: ignore[assignment]
        if isinstance(only.get(REF_KEY), str):
            return Value(name, "", blob=only[REF_KEY])
        if ESCAPE_KEY in only:  # user data that looked like a reference, shown as written
            return Value(name, pretty(only[ESCAPE_KEY]))
    return Value(name, pretty(raw))


def _shown(key: str, value: Any) -> Any:
    if key in _TIMES and isinstance(value, int | float):
        return fmt_time(float(value))
    if key == "duration_s" and isinstance(value, int | float):
        return fmt_duration(float(value))
    return value if isinstance(value, str | int | float | bool) else pretty(value)


def _summary(data: dict[str, Any]) -> str:
    parts: list[str] = []
    for key, value in data.items():
        if key in _HIDDEN or key == "step_id" or value in (None, "", [], {}):
            continue
        parts.append(f"{key}={_shown(key, value)}")
    return " ".join(parts)


def row(event: Event, start: float) -> Row:
    """The timeline row of one event."""
    data = event.model_dump(mode="json")
    values = [_value(name, data[name]) for name in PAYLOAD_FIELDS if data.get(name) is not None]
    return Row(
        seq=event.seq,
        at=event.at,
        offset=max(0.0, event.at - start),
        type=event.type,
        step_id=data.get("step_id"),
        summary=_summary(data),
        values=values,
    )


def _bars(events: Sequence[Event], now: float) -> list[Bar]:
    bars: dict[str, Bar] = {}
    for event in events:
        data = event.model_dump()
        step_id = data.get("step_id")
        if event.type == "EffectStarted" and step_id is not None:
            bar = bars.setdefault(
                step_id, Bar(step_id, data["effect"], "running", event.at, 0.0, 0)
            )
            bar.attempts = max(bar.attempts, int(data.get("attempt", 1)))
            bar.status = "running"
            bar.duration = now - bar.start
        elif event.type in _OUTCOMES and step_id is not None:
            # An idempotent effect records no intent: its outcome says how long it ran.
            took = float(data.get("duration_s") or 0.0)
            bar = bars.setdefault(
                step_id, Bar(step_id, data.get("effect", "?"), "", event.at - took, took, 0)
            )
            bar.attempts = max(bar.attempts, int(data.get("attempts") or 1))
            bar.status = _OUTCOMES[event.type]
            if event.type == "EffectVerdict":
                bar.status = f"verdict: {data.get('verdict')}"
            bar.duration = max(0.0, event.at - bar.start)
    return list(bars.values())


def in_story_order(rows: list[Row], events: Sequence[Event]) -> list[Row]:
    """``rows`` (one per event, in seq order) with each child flow's result moved to just
    after the ``ChildStarted`` that started the child.

    A child run inline ends, and resumes its parent, before the parent's step has recorded
    ``ChildStarted``: the log holds the child's result first, and listed in seq order the
    page said a child ended before it started. The seq column keeps each event's place in
    the log; the moved row says it was recorded earlier.
    """
    started = {
        e.child_id: e.seq for e in events if e.type == "ChildStarted" and hasattr(e, "child_id")
    }
    early: dict[int, list[Row]] = {}
    kept: list[Row] = []
    for r, event in zip(rows, events, strict=True):
        key = getattr(event, "correlation_key", None)
        if event.type == "ExecutionResumed" and getattr(event, "on", "") == CHILD_GATE:
            at = started.get(str(key))
            if at is not None and at > event.seq:
                r.note = f"recorded at #{event.seq}, before the child's start was (it ran inline)"
                early.setdefault(at, []).append(r)
                continue
        kept.append(r)
    ordered: list[Row] = []
    for r in kept:
        ordered.append(r)
        ordered.extend(early.pop(r.seq, []))
    return ordered


def build(events: Sequence[Event], now: float, finished: bool) -> Timeline:
    """The timeline of ``events`` (in seq order); ``now`` ends the bars of open steps."""
    times = [e.at for e in events] or [now]
    start = min(times)
    end = max(times) if finished else max(now, *times)
    bars = _bars(events, end)
    span = max(end - start, 1e-6)
    for bar in bars:
        bar.x = max(0, min(_BAR_SCALE - 1, int((bar.start - start) / span * _BAR_SCALE)))
        bar.width = max(2, min(_BAR_SCALE - bar.x, round(bar.duration / span * _BAR_SCALE)))
    rows = in_story_order([row(e, start) for e in events], events)
    return Timeline(rows, bars, start, span)
