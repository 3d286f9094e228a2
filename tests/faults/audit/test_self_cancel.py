"""An effect that raises ``CancelledError`` though nothing cancelled it, on SQLite on disk.

Fault: an effect lets a ``CancelledError`` out of a call of its own (a library's cancelled
request) while neither a cancel, a timeout nor a supersession was asked of the task running
it. Before the fix the engine took it for its own cancellation: the execute call ended with
nothing recorded and reported ``running``, and each redelivery ran the effect again and
ended the same way, with no error anywhere.

Promise checked: it is the effect's error: each attempt is recorded, the retry policy runs,
the flow handles ``EffectFailedError`` naming what happened, and the execution completes. A
real cancel still reaches the flow as a cancellation (``tests/composition``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from tests.faults.audit.audit_app import app
from tests.faults.harness import Ledger


async def test_an_unrequested_cancelled_error_is_the_effects_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "LOOM_TEST_SIDE_FILE", str(tmp_path / "ledger.txt"))
    store = SqliteEventStore(tmp_path / "loom.db")
    runtime = Runtime(app, store)
    try:
        result = await runtime.start("audit.self_cancels", None, execution_id="s-1")
        assert result.status == "completed" and result.output == "caught EffectFailedError"
        assert Ledger(tmp_path / "ledger.txt").keys() == ["s-1:1", "s-1:1"]  # two attempts
        [failed] = [e for e in await runtime.history("s-1") if e.type == "EffectFailed"]
        assert "CancelledError though nothing cancelled it" in failed.error.message  # type: ignore[attr-defined]
    finally:
        await store.aclose()
