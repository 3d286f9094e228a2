"""Effect code that raises ``SystemExit`` or ``KeyboardInterrupt`` inside a served worker.

Fault: a sync effect (in its worker thread) or an async one calls ``sys.exit`` or raises
``KeyboardInterrupt`` (argparse and click do the first on bad arguments). asyncio lets both
out of the task and out of the event loop itself; before the fix, ``loom serve`` kept
answering ``/live`` while every other request waited forever on its dead loop.

Promise checked: the worker answers within the deadline and keeps serving other
executions; the execute call stops as a worker death would (the non-idempotent effect ran
once, its intent has no outcome, nothing more is recorded); a redelivery parks it in doubt
without running it again, and a verdict completes it. The CLI names the exit instead of dying
with a traceback. Real ``loom serve`` and CLI processes on a
SQLite file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import harness as h

APP = "tests.faults.audit.audit_app:app"
pytestmark = pytest.mark.slow  # real worker and CLI processes


def _env(tmp_path: Path) -> dict[str, str]:
    return h.env_for(tmp_path, f"sqlite:///{tmp_path}/loom.db", LOOM_APP=APP)


def _start(base: str, eid: str, flow: str, value: object) -> h.Answer:
    body = {"flow": flow, "input": value, "execution_id": eid}
    return h.call(base, "POST", "/executions", body)


def _history(base: str, eid: str) -> list[str]:
    answer = h.call(base, "GET", f"/executions/{eid}")
    assert answer.status == 200, answer.body
    return [e if isinstance(e, str) else e["type"] for e in answer.body["history"]]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("how", ["exit", "interrupt"])
def test_an_effect_that_exits_stops_its_call_not_the_worker(
    tmp_path: Path, how: str, kind: str
) -> None:
    ledger = h.Ledger(tmp_path / "ledger.txt")
    with h.served(tmp_path, _env(tmp_path)) as base:
        first = _start(base, "x-1", "audit.once", {"how": how, "kind": kind})
        assert first.seconds < h.DEADLINE and first.status < 500, first.body
        # The same worker still runs other executions to their end.
        other = _start(base, "x-2", "audit.once", {"how": "ok", "kind": kind})
        assert other.status == 200 and other.body["status"] == "completed", other.body
        assert ledger.keys() == ["x-1:1", "x-2:1"]
        # Nothing was recorded after the intent: the step's outcome is unknown.
        assert _history(base, "x-1")[-1] == "EffectStarted"

        again = h.call(base, "POST", "/execute", {"executionPackage": {"execution_id": "x-1"}})
        assert again.status == 200 and again.body["status"] == "in_doubt", again.body
        assert [d["step_id"] for d in again.body["in_doubt"]] == ["1"]
        assert ledger.keys() == ["x-1:1", "x-2:1"], "the effect ran again"
        episode = str(again.body["in_doubt"][0]["episode"])
    verdict = ("verdict", "x-1", "1", "performed", "--output", '"seen"', "--episode", episode)
    done = h.cli(_env(tmp_path), *verdict)
    assert done.returncode == 0 and "completed" in done.stdout, done.stdout + done.stderr
    assert ledger.keys() == ["x-1:1", "x-2:1"]


def test_the_execute_route_answers_a_retryable_error_naming_the_effect(tmp_path: Path) -> None:
    with h.served(tmp_path, _env(tmp_path)) as base:
        started = _start(base, "i-1", "audit.idempotent", "exit")
        assert started.status == 200 and started.body["status"] == "running", started.body
        # A redelivery (what Cloud Tasks sends) runs the idempotent step again, same key,
        # and hears why the call stopped: a 5xx, so the delivery is retried.
        answer = h.call(base, "POST", "/execute", {"executionPackage": {"execution_id": "i-1"}})
        assert answer.status == 500, answer.body
        assert answer.body["code"] == "exit_requested"
        assert "audit.sync_idempotent" in answer.body["message"]
        assert "SystemExit(3)" in answer.body["message"]
        assert h.call(base, "GET", "/live").status == 200
    assert h.Ledger(tmp_path / "ledger.txt").keys() == ["i-1:1", "i-1:1"]


def test_the_cli_names_the_exit_and_the_next_execute_parks_in_doubt(tmp_path: Path) -> None:
    env = _env(tmp_path)
    started = h.cli(env, "start", "audit.once", "--id", "c-1", "--input", '{"how": "exit"}')
    # Started, and told why its run stopped: the execution is there, running, not failed.
    assert started.returncode == 0 and "running" in started.stdout, started.stderr
    assert "audit.async_once" in started.stderr and "SystemExit(3)" in started.stderr
    assert "Traceback" not in started.stderr
    after = h.cli(env, "execute", "c-1")
    assert after.returncode == 0 and "in_doubt" in after.stdout, after.stdout + after.stderr
    assert h.Ledger(tmp_path / "ledger.txt").keys() == ["c-1:1"]
