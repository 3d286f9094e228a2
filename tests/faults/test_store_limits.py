"""Writes over a store limit are refused for good, never answered "retry later".

A real ``loom serve`` process on a SQLite file whose largest event is set low
(``LOOM_SQLITE_MAX_EVENT_BYTES``), and the CLI in its own process. An effect output over the
limit fails its step with ``code="store_limit"`` (the flow handles it; the effect is not run
again, an execute call later changes nothing), a flow result over it fails the execution
with that code, and a caller's own payload over it gets 413 (CLI exit 2) naming the limit,
nothing written. No answer is a 503: Cloud Tasks or a client would retry that forever.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.faults import harness as h

pytestmark = pytest.mark.slow

LIMIT = 20_000
OVER = 3 * LIMIT  # under the blob threshold (256 KiB): it stays in the event


def _start(eid: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"flow": "fault.sized", "input": spec, "execution_id": eid}


def _history(base: str, eid: str) -> list[dict[str, Any]]:
    view = h.call(base, "GET", f"/executions/{eid}")
    assert view.status == 200, view.body
    return view.body["history"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    db = tmp_path / "db" / "loom.db"
    return h.env_for(tmp_path, f"sqlite:///{db}", LOOM_SQLITE_MAX_EVENT_BYTES=str(LIMIT))


@pytest.mark.parametrize("effect", ["side.sized", "side.sized_once"])
def test_an_output_over_the_limit_fails_its_step_once(
    tmp_path: Path, env: dict[str, str], effect: str
) -> None:
    ledger = h.Ledger(tmp_path / "ledger.txt")
    with h.served(tmp_path, env) as base:
        first = h.call(
            base, "POST", "/executions", _start("o-1", {"effect": effect, "output": OVER})
        )
        assert first.status == 200, first.body
        assert (first.body["status"], first.body["output"]) == (
            "completed",
            {"failed": "store_limit"},
        )
        failed = [e for e in _history(base, "o-1") if e["type"] == "EffectFailed"]
        assert [f["error"]["code"] for f in failed] == ["store_limit"]
        assert str(LIMIT) in failed[0]["error"]["message"]
        assert "EffectCompleted" not in [e["type"] for e in _history(base, "o-1")]
        again = h.call(base, "POST", "/execute", {"executionPackage": {"execution_id": "o-1"}})
        assert (again.status, again.body["status"]) == (200, "completed"), again.body
    assert ledger.keys() == ["o-1:1"]  # invoked once: no retry loop, no second run


def test_a_result_over_the_limit_fails_the_execution(tmp_path: Path, env: dict[str, str]) -> None:
    with h.served(tmp_path, env) as base:
        answer = h.call(base, "POST", "/executions", _start("r-1", {"output": 5, "result": OVER}))
        assert answer.status == 200, answer.body
        assert answer.body["status"] == "failed", answer.body
        assert answer.body["error"]["code"] == "store_limit", answer.body
        types = [e["type"] for e in _history(base, "r-1")]
        assert types[-1] == "ExecutionFailed" and "ExecutionCompleted" not in types
        again = h.call(base, "POST", "/execute", {"executionPackage": {"execution_id": "r-1"}})
        assert (again.status, again.body["status"]) == (200, "failed"), again.body


def test_a_start_input_over_the_limit_gets_413_and_writes_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    big = {"output": 5, "padding": "z" * OVER}
    with h.served(tmp_path, env) as base:
        answer = h.call(base, "POST", "/executions", _start("s-1", big))
        assert answer.status == 413, answer.body
        assert "Retry-After" not in answer.headers
        assert answer.body["code"] == "store_limit", answer.body
        assert answer.body["details"]["max"] == LIMIT, answer.body
        assert h.call(base, "GET", "/executions/s-1").status == 404
    cli = h.cli(env, "start", "fault.sized", "--id", "s-2", "--input", json.dumps(big))
    assert cli.returncode == 2, (cli.returncode, cli.stderr)
    assert "LOOM_SQLITE_MAX_EVENT_BYTES" in cli.stderr and cli.stderr.count("\n") == 1
    shown = h.cli(env, "show", "s-2")
    assert shown.returncode == 2 and "unknown execution" in shown.stderr, shown.stderr
