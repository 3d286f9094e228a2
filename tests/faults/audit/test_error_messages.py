"""Errors that are hard to record: a huge message, and a message that cannot be read.

Faults, in process on a SQLite file whose largest event is 20,000 bytes (as Firestore's
1 MiB document is a limit): a non-idempotent effect (two attempts) raises an exception
whose message is 50,000 characters (an HTTP error carrying a whole response body), or an
exception whose ``__str__`` raises; a flow raises the same itself. Before the fix the
failure event of the first could not be stored, so the step's outcome was never recorded
and the flow never saw it (the execution failed with ``store_limit``); the second escaped
the engine's error recording into the flow as a ``RuntimeError`` of its own, skipping the
retry and leaving the step without an outcome in a completed execution.

Promise checked: every attempt's failure is recorded (the message cut to a bounded size,
or replaced by a note naming the exception's type), the retry policy runs its attempts,
the flow handles ``EffectFailedError`` once the attempts are spent, and a flow's own error
fails the execution under its own type.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.kernel.effects import MAX_ERROR_MESSAGE
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from tests.faults.audit.audit_app import app
from tests.faults.harness import Ledger

BIG = "50000"


@pytest.fixture
async def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Runtime]:
    """A runtime on a SQLite file that stores events of up to 20,000 bytes."""
    monkeypatch.setitem(os.environ, "LOOM_TEST_SIDE_FILE", str(tmp_path / "ledger.txt"))
    store = SqliteEventStore(tmp_path / "loom.db", max_event_bytes=20_000)
    yield Runtime(app, store)
    await store.aclose()


@pytest.mark.parametrize("how", [BIG, "unprintable"])
async def test_an_effects_hard_to_record_error_is_recorded_and_handled(
    runtime: Runtime, tmp_path: Path, how: str
) -> None:
    result = await runtime.start("audit.fails", how, execution_id="e-1")
    assert result.status == "completed" and result.output == "caught EffectFailedError"
    assert Ledger(tmp_path / "ledger.txt").keys() == ["e-1:1", "e-1:1"]  # both attempts
    events = await runtime.history("e-1")
    failed = [e for e in events if e.type == "EffectFailed"]
    assert len(failed) == 1
    message: str = failed[0].error.message  # type: ignore[attr-defined]
    if how == BIG:
        assert message.startswith("x" * MAX_ERROR_MESSAGE)
        assert len(message) < MAX_ERROR_MESSAGE + 100 and "characters more" in message
    else:
        assert failed[0].error.type == "Unprintable"  # type: ignore[attr-defined]
        assert "cannot be read" in message


@pytest.mark.parametrize("how", [BIG, "unprintable"])
async def test_a_flows_hard_to_record_error_fails_it_under_its_own_type(
    runtime: Runtime, how: str
) -> None:
    result = await runtime.start("audit.raises", how, execution_id="f-1")
    assert result.status == "failed" and result.error is not None
    expected = "ValueError" if how == BIG else "Unprintable"
    assert (result.error["code"], result.error["type"]) == ("flow_error", expected)
    assert len(result.error["message"]) < MAX_ERROR_MESSAGE + 100
