"""Flow code that raises ``SystemExit`` or ``KeyboardInterrupt``, in process on SQLite.

Fault: the flow function itself (not an effect) calls ``sys.exit`` or raises
``KeyboardInterrupt`` after a recorded step. Promise checked: the execute call fails with
``ExitRequestedError`` naming the flow, the event loop it ran on keeps running other
executions, and nothing more is recorded: exactly what a worker death there leaves (the
execution stays ``running`` for a redelivery or a poison park to settle; the idempotent
step's completion, held until the next durable point, is lost with the call and the step
runs again with the same key).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loom.errors import ExitRequestedError
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.wire import ExecutionPackage
from tests.faults.audit.audit_app import app
from tests.faults.harness import Ledger


@pytest.mark.parametrize("how", ["exit", "interrupt"])
async def test_a_flow_that_exits_fails_its_call_not_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setitem(os.environ, "LOOM_TEST_SIDE_FILE", str(tmp_path / "ledger.txt"))
    store = SqliteEventStore(tmp_path / "loom.db")
    runtime = Runtime(app, store)
    try:
        with pytest.raises(ExitRequestedError, match=r"flow 'audit\.flow_exits' raised") as err:
            await runtime.start("audit.flow_exits", how, execution_id="f-1")
        assert err.value.code == "exit_requested"
        done = await runtime.start("audit.idempotent", "ok", execution_id="f-2")
        assert done.status == "completed"  # the same loop runs the next execution
        types = [e.type for e in await runtime.history("f-1")]
        assert types == ["ExecutionStarted", "ExecutionClaimed"]
        assert (await runtime.result("f-1")).status == "running"
        with pytest.raises(ExitRequestedError):  # deterministic: the redelivery stops again
            await runtime.execute(ExecutionPackage(execution_id="f-1"))
        assert Ledger(tmp_path / "ledger.txt").keys() == ["f-1:1", "f-2:1", "f-1:1"]
    finally:
        await store.aclose()
