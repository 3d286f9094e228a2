"""An effect output or a flow result over the log's inline limit with no blob store, on
SQLite on disk.

Fault: an effect returns 300 KiB of JSON (the log keeps at most 256 KiB inline; more goes to
a blob store, ``LOOM_BLOBS``) and none is configured, as in the README's minimal example.
Before the fix the record of the output raised ``ConfigurationError`` out of every execute
call: an idempotent effect ran again on every redelivery until the execution was parked as
poison, and a non-idempotent one was left with an open intent. A flow returning as much
failed the same way. (``loom serve`` and the CLI on SQLite keep blobs beside the database
by default; ``Runtime(app, SqliteEventStore(path))`` has none.)

Promise checked: the step fails once, recorded, with ``code="output_too_large"`` naming the
step, the size and the limit and saying a blob store lifts it; not retried, never run again,
the flow handles the failure; a redelivery runs nothing. A flow's result over the limit fails
the execution with the same code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.errors import PayloadTooLargeError, UnknownExecutionError
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.faults import harness as h

SIZE = 300 * 1024 + 2  # the JSON string's quotes
LIMIT = 256 * 1024


def _names_the_fault(message: str, step: str) -> None:
    assert f"step {step}" in message, message
    assert f"{SIZE} bytes" in message and f"{LIMIT}-byte" in message, message
    assert "blob store" in message and "LOOM_BLOBS" in message, message


@pytest.mark.parametrize("effect", ["async", "sync", "idempotent"])
async def test_an_output_over_the_limit_fails_the_step_once(
    runtime: Runtime, tmp_path: Path, effect: str
) -> None:
    args = {"effect": effect, "kind": "big"}
    result = await runtime.start("audit.unrecordable_output", args, execution_id="b-1")
    assert result.status == "completed" and result.output == "caught EffectFailedError"
    ledger = h.Ledger(tmp_path / "ledger.txt")
    assert ledger.keys() == ["b-1:1"], "the effect ran again"
    history = await runtime.history("b-1")
    [failed] = [e for e in history if e.type == "EffectFailed"]
    error = failed.error  # type: ignore[attr-defined]
    assert error.code == "output_too_large" and failed.attempts == 1  # type: ignore[attr-defined]
    _names_the_fault(error.message, "1")
    assert (await runtime.load_state("b-1")).steps["1"].get("status") == "failed"
    again = await runtime.execute(ExecutionPackage(execution_id="b-1"))
    assert again.status == "completed" and ledger.keys() == ["b-1:1"]


async def test_a_flow_result_over_the_limit_fails_the_execution(runtime: Runtime) -> None:
    result = await runtime.start("audit.unrecordable_result", "big", execution_id="r-1")
    assert result.status == "failed", result
    assert result.error is not None and result.error["code"] == "output_too_large"
    message = result.error["message"]
    assert f"{SIZE} bytes" in message and f"{LIMIT}-byte" in message and "LOOM_BLOBS" in message
    assert [e.type for e in await runtime.history("r-1")][-1] == "ExecutionFailed"


@pytest.mark.parametrize("where", ["event", "child"])
async def test_a_value_the_flow_records_over_the_limit_is_raised_into_the_flow(
    runtime: Runtime, where: str
) -> None:
    """``ctx.set_event`` or a child's input over the limit: before, the execute call aborted
    with ``ConfigurationError`` on every delivery (the same value each time) until the
    execution was poison; now the flow gets ``PayloadTooLargeError`` and may handle it."""
    result = await runtime.start("audit.big_values", where, execution_id="v-1")
    assert (result.status, result.output) == ("completed", "caught PayloadTooLargeError")
    again = await runtime.execute(ExecutionPackage(execution_id="v-1"))
    assert again.status == "completed"


async def test_a_start_input_over_the_limit_is_refused_as_too_large(runtime: Runtime) -> None:
    with pytest.raises(PayloadTooLargeError) as refused:
        await runtime.start("audit.length", "x" * (300 * 1024), execution_id="i-1")
    assert refused.value.code == "too_large"  # HTTP 413, CLI exit 2
    assert refused.value.details == {"size": SIZE, "limit": LIMIT}
    assert "LOOM_BLOBS" in refused.value.message
    with pytest.raises(UnknownExecutionError):
        await runtime.history("i-1")  # nothing written
