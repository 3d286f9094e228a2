"""Values JSON cannot hold, returned by an effect or a flow, in process on SQLite on disk.

Fault: an effect or a flow returns bytes that are not UTF-8 (``UnicodeDecodeError`` while
serializing) or a value nested deeper than the serializer goes (``ValueError``). Before the
fix, only pydantic's own serialization error was known as "the output cannot be recorded":
these two were taken for the effect's failure, so a non-idempotent effect with a retry
policy, which had run and returned, was run again up to its last attempt; a flow's result
escaped the execute call as a bare ``UnicodeDecodeError``/``ValueError`` (an HTTP 500,
retried until the execution was parked as poison).

Promise checked: an effect that returned is never run again for it: the step fails for good
with ``code="invalid_output"`` naming the cause, once, and the flow handles it; a flow's
result that cannot be recorded fails the execution with ``invalid_output``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.runtime import Runtime
from tests.faults.harness import Ledger

CAUSES = {"bytes": "can't decode byte 0xff", "deep": "depth exceeded"}


@pytest.mark.parametrize("effect", ["async", "sync"])
@pytest.mark.parametrize("kind", list(CAUSES))
async def test_an_unrecordable_output_fails_the_step_without_running_it_again(
    runtime: Runtime, tmp_path: Path, effect: str, kind: str
) -> None:
    args = {"effect": effect, "kind": kind}
    result = await runtime.start("audit.unrecordable_output", args, execution_id="o-1")
    assert result.status == "completed" and result.output == "caught EffectFailedError"
    assert Ledger(tmp_path / "ledger.txt").keys() == ["o-1:1"], "the effect ran again"
    failed = [e for e in await runtime.history("o-1") if e.type == "EffectFailed"]
    assert len(failed) == 1
    error = failed[0].error  # type: ignore[attr-defined]
    assert error.code == "invalid_output"
    assert "the effect ran but its output cannot be recorded" in error.message
    assert CAUSES[kind] in error.message


@pytest.mark.parametrize("kind", list(CAUSES))
async def test_an_unrecordable_flow_result_fails_the_execution(runtime: Runtime, kind: str) -> None:
    result = await runtime.start("audit.unrecordable_result", kind, execution_id="r-1")
    assert result.status == "failed", result
    assert result.error is not None and result.error["code"] == "invalid_output"
    assert CAUSES[kind] in result.error["message"]
    assert [e.type for e in await runtime.history("r-1")][-1] == "ExecutionFailed"
