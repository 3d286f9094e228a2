"""How the CLI prints results, timelines and lists (rich, imported only by the CLI)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from loom.events import Event
from loom.primitives.continuation import run_chain
from loom.wire import ExecutionResult

console = Console(highlight=False)

_STATUS_STYLE = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "suspended": "cyan",
    "in_doubt": "magenta",
    "running": "blue",
}


# Event fields holding epoch seconds: shown as UTC times, never as raw floats.
_TIME_FIELDS = frozenset({"until", "wake_at", "not_before", "started_at", "deadline", "at"})


def _when(at: float | None) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SS`` (UTC)."""
    if not at:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _clock(at: float | None) -> str:
    """Epoch seconds as ``HH:MM:SS.mmm`` (UTC), for rows under a dated header."""
    if not at:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_text(result: ExecutionResult) -> str:
    """One line: id, status, and what it waits for or ended with."""
    style = _STATUS_STYLE.get(result.status, "white")
    line = f"{result.execution_id}  [{style}]{result.status}[/{style}]"
    if result.parked_reason:
        line += f"  parked: {result.parked_reason}"
    for gate in result.waiting_on:
        line += f"  waiting on {gate.on} ({gate.correlation_key})"
        if gate.wake_at:
            line += f" until {_when(gate.wake_at)} UTC"
    for doubt in result.in_doubt:
        line += f"  in doubt: step {doubt.step_id} {doubt.effect} key={doubt.idempotency_key}"
    if result.status == "completed":
        line += f"  output={_short(result.output)}"
    if result.error:
        line += f"  error={result.error.get('code')}: {result.error.get('message')}"
    return line


def render_result(result: ExecutionResult) -> None:
    """Print one result line."""
    console.print(status_text(result), soft_wrap=True)


def _detail(event: Event) -> str:
    data = event.model_dump(exclude={"type", "seq", "at", "schema_version", "step_id"})
    for noisy in ("attempts", "duration_s", "output_bytes"):
        data.pop(noisy, None)
    return " ".join(
        f"{k}={_when(v) if k in _TIME_FIELDS and isinstance(v, float | int) else _short(v, 48)}"
        for k, v in data.items()
        if v not in (None, [], {})
    )


def _lineage(state: dict[str, Any]) -> list[str]:
    """Child flows: the parent of this execution and the children it started."""
    lines: list[str] = []
    parent = state.get("parent")
    if parent:
        lines.append(f"  parent {parent['execution_id']} (step {parent['step_id']})")
    recorded: dict[str, dict[str, str]] = state.get("children") or {}
    children = [c["child_id"] for c in recorded.values()]
    if children:
        lines.append(f"  children {', '.join(children)}")
    return lines


def render_timeline(result: ExecutionResult, events: Sequence[Event]) -> None:
    """Print the state line, the metering counters, and one row per event (80 columns fit:
    the detail column folds, the others never wrap)."""
    console.print(status_text(result), soft_wrap=True)
    origin = getattr(events[0], "forked_from", None) if events else None
    if origin is not None:
        console.print(
            f"  forked from {origin.execution_id} at step {origin.step_id} (#{origin.seq})"
        )
    meter = result.meter
    console.print(
        f"  effect calls {meter.get('effect_calls', 0)}, attempts {meter.get('attempts', 0)}, "
        f"effect time {meter.get('effect_seconds', 0.0):.3f}s, "
        f"bytes stored {meter.get('bytes_stored', 0)}"
    )
    if events:
        console.print(f"  times are UTC, started {_when(events[0].at)}")
    runs = run_chain(result.execution_id, events)
    if len(runs) > 1:  # continued as new: the chain of runs, the current one last
        console.print("  runs: " + " → ".join(f"{r['run_id']} (#{r['first_seq']})" for r in runs))
    for line in _lineage(result.state):
        console.print(line)
    table = Table(box=None, pad_edge=False)
    for col in ("seq", "time", "event", "step"):
        table.add_column(col, no_wrap=True)
    table.add_column("detail", overflow="fold", min_width=20)
    for event in events:
        table.add_row(
            str(event.seq),
            _clock(event.at),
            event.type,
            getattr(event, "step_id", "") or "",
            _detail(event),
        )
    console.print(table)


def show_json(result: ExecutionResult, events: Sequence[Event]) -> dict[str, Any]:
    """The ``loom show --json`` document."""
    return {
        "execution_id": result.execution_id,
        "status": result.status,
        "output": result.output,
        "error": result.error,
        "parked_reason": result.parked_reason,
        "meter": result.meter,
        "in_doubt": [d.model_dump() for d in result.in_doubt],
        "runs": run_chain(result.execution_id, events),
        "events": [e.model_dump(mode="json") for e in events],
    }
