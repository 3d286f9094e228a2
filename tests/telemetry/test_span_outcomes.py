"""What a ``loom.execute`` span says about its execute call: a failed execution's span has
status ERROR (so any tracing backend shows it as an error), and the span of ``loom
execute`` (the command line, whose claim runs in a task of its own) names its flow."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner
from opentelemetry.trace import StatusCode

from loom import FlowContext, Loom
from loom.cli import main
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.wire import ExecutionPackage
from tests.telemetry.conftest import Otel

app = Loom("outcomes")


@app.flow("breaks")
async def breaks(ctx: FlowContext, n: int) -> int:
    raise ValueError(f"no good: {n}")


@app.flow("fine")
async def fine(ctx: FlowContext, n: int) -> int:
    return n


def _execute_spans(otel: Otel) -> list:
    return [s for s in otel.spans.get_finished_spans() if s.name == "loom.execute"]


def test_a_failed_execution_span_has_status_error(tmp_path: Path, otel: Otel) -> None:
    async def go() -> None:
        runtime = Runtime(app, SqliteEventStore(str(tmp_path / "l.db")))
        await runtime.start("breaks", 3, execution_id="b-1", run=False)
        await runtime.start("fine", 3, execution_id="f-1", run=False)
        for eid in ("b-1", "f-1"):
            await runtime.execute(ExecutionPackage(execution_id=eid))
        await runtime.store.aclose()

    asyncio.run(go())
    spans = {s.attributes["loom.execution_id"]: s for s in _execute_spans(otel)}
    failed = spans["b-1"]
    assert failed.attributes["loom.status"] == "failed"
    assert failed.status.status_code is StatusCode.ERROR
    assert "no good: 3" in (failed.status.description or "")
    assert spans["f-1"].status.status_code is not StatusCode.ERROR


def test_the_span_of_loom_execute_names_its_flow(tmp_path: Path, otel: Otel) -> None:
    store = f"sqlite:///{tmp_path / 'l.db'}"
    base = ["--app", "tests.telemetry.test_span_outcomes:app", "--store", store]
    runner = CliRunner()
    started = runner.invoke(main, [*base, "start", "fine", "--input", "1", "--id", "c-1"])
    assert started.exit_code == 0, started.output
    otel.spans.clear()
    # A second execute call of a finished execution: the command line's own call.
    done = runner.invoke(main, [*base, "execute", "c-1"])
    assert done.exit_code == 0, done.output
    [span] = _execute_spans(otel)
    assert span.attributes["loom.execution_id"] == "c-1"
    assert span.attributes["loom.flow"] == "fine"
