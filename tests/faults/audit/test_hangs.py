"""Sync effects that block past their timeout, in real CLI and ``loom serve`` processes.

Fault: a sync effect blocks (a socket read without a timeout) far longer than its
``timeout``. The flow moves on at the timeout, but a thread cannot be stopped. Before the
fix the call ran on the loop's shared thread pool: ``loom start`` printed the answer and
then did not exit until the effect returned, and a served worker with as many hung calls as
pool threads timed out every later sync effect in the queue, without ever running it.

Promise checked: the step fails with its timeout once and the flow handles it; the CLI
exits as soon as the flow has answered; a worker keeps running other sync effects with a
timeout however many hung calls it carries (each invoked once, as the ledger shows).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.faults import harness as h

APP = "tests.faults.audit.audit_app:app"
pytestmark = pytest.mark.slow  # real worker and CLI processes
HANG = "120"  # seconds the hung effect blocks: far past every bound below


def _env(tmp_path: Path) -> dict[str, str]:
    return h.env_for(tmp_path, f"sqlite:///{tmp_path}/loom.db", LOOM_APP=APP, THREADS="2")


def test_the_cli_exits_once_the_flow_has_answered(tmp_path: Path) -> None:
    began = time.monotonic()
    run = h.cli(_env(tmp_path), "start", "audit.hangs", "--id", "h-1", "--input", HANG)
    assert time.monotonic() - began < h.DEADLINE  # (h.cli's own timeout would raise)
    assert run.returncode == 0, run.stderr
    assert "completed" in run.stdout and "gave up: EffectFailedError" in run.stdout
    assert h.Ledger(tmp_path / "ledger.txt").keys() == ["h-1:1"]


def test_hung_calls_do_not_starve_a_workers_other_sync_effects(tmp_path: Path) -> None:
    hung = [f"h-{n}" for n in range(8)]  # more than the pool's threads (at least 6 here)
    with h.served(tmp_path, _env(tmp_path)) as base:
        for eid in hung:
            body = {"flow": "audit.hangs", "input": float(HANG), "execution_id": eid}
            answer = h.call(base, "POST", "/executions", body)
            assert answer.body["output"] == "gave up: EffectFailedError", answer.body
        answer = h.call(base, "POST", "/executions", {"flow": "audit.quick", "execution_id": "q"})
        assert answer.status == 200 and answer.body["output"] == "quick", answer.body
    assert h.Ledger(tmp_path / "ledger.txt").keys() == [f"{eid}:1" for eid in [*hung, "q"]]
