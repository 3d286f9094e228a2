"""The timeline the execution page draws, built from events alone."""

from __future__ import annotations

from loom import events as ev
from loom.workers.console.timeline import build


def test_bars_span_from_intent_or_measured_duration_to_outcome() -> None:
    events: list[ev.Event] = [
        ev.ExecutionStarted(
            execution_id="e", flow="f", input={"$blob": "e/input"}, seq=1, at=100.0
        ),
        ev.EffectStarted(step_id="1", effect="pay", idempotency_key="e:1", seq=2, at=101.0),
        ev.EffectInDoubt(step_id="1", effect="pay", seq=3, at=102.0),
        ev.EffectVerdict(
            step_id="1", verdict="not_performed", by="ana", episode=3, seq=4, at=110.0
        ),
        ev.EffectCompleted(
            step_id="2", effect="mail", output={"$loom.value": 1}, duration_s=2.0, seq=5, at=120.0
        ),
        ev.ExecutionCompleted(output=None, seq=6, at=120.0),
    ]
    timeline = build(events, now=500.0, finished=True)
    bars = {b.step_id: b for b in timeline.bars}
    assert (bars["1"].status, bars["1"].duration) == ("verdict: not_performed", 9.0)
    assert (bars["2"].status, bars["2"].start, bars["2"].duration) == ("completed", 118.0, 2.0)
    assert timeline.span == 20.0  # a finished execution's bars end at its last event
    assert (bars["1"].x, bars["1"].width) == (50, 450)
    assert (bars["2"].x, bars["2"].width) == (900, 100)
    started, *_, done, _ = timeline.rows
    [given] = started.values
    assert (given.name, given.blob, given.text) == ("input", "e/input", "")  # fetched on demand
    [output] = done.values
    assert output.text == "1"  # an escaped user value is shown as the user wrote it
    assert "duration_s=2.0 s" in done.summary


def test_an_open_step_runs_until_now() -> None:
    events: list[ev.Event] = [
        ev.ExecutionStarted(execution_id="e", flow="f", seq=1, at=0.0),
        ev.EffectStarted(step_id="1", effect="slow", idempotency_key="e:1", seq=2, at=5.0),
    ]
    [bar] = build(events, now=10.0, finished=False).bars
    assert (bar.status, bar.duration, bar.x, bar.width) == ("running", 5.0, 500, 500)
