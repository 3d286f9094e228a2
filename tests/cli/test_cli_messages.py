"""``loom send``, ``loom get-event`` and the run chain in ``loom show``, on the embedded
SQLite default with the entity example."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom.cli import main

ROOT = Path(__file__).resolve().parents[2]
Run = Callable[..., tuple[int, str]]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.chdir(ROOT)  # examples.entity is importable from the checkout
    runner = CliRunner()
    base = ["--app", "examples.entity:app", "--store", f"sqlite:///{tmp_path}/loom.db"]

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, [*base, *args], catch_exceptions=False)
        return result.exit_code, result.output

    return invoke


def test_send_get_event_and_the_run_chain(run: Run) -> None:
    assert run("start", "account", "--id", "alice", "--input", '{"balance": 10}')[0] == 0
    code, out = run("get-event", "alice", "balance")
    assert (code, json.loads(out)) == (0, 10)
    for amount in (1, 2, 3, 4):
        code, out = run(
            "send", "alice", "command", json.dumps({"kind": "deposit", "amount": amount})
        )
        assert code == 0, out
    code, out = run("send", "alice", "command", '{"kind": "deposit", "amount": 4}', "--id", "m")
    code, again = run("send", "alice", "command", '{"kind": "deposit", "amount": 4}', "--id", "m")
    assert code == 0 and "suspended" in again
    assert json.loads(run("get-event", "alice", "balance", "--timeout", "1")[1]) == 24
    code, out = run("show", "alice", "--json")
    doc = json.loads(out)
    assert [r["run_id"] for r in doc["runs"]] == ["alice#run1", "alice#run2"]
    code, out = run("show", "alice")
    assert "alice#run1" in out and "alice#run2" in out


def test_clear_errors(run: Run) -> None:
    code, out = run("send", "nobody", "command", "{}")
    assert code == 2 and "unknown" in out.lower()
    run("start", "account", "--id", "bob", "--input", "{}")
    code, out = run("get-event", "bob", "never-set")
    assert code == 2 and "never-set" in out
    code, out = run("send", "bob", "command", "{not json")
    assert code == 2 and "not valid JSON" in out
    run("send", "bob", "command", '{"kind": "close"}')
    code, out = run("send", "bob", "command", '{"kind": "close"}')
    assert code == 2 and "completed" in out


def test_a_used_message_id_with_another_payload_is_refused(run: Run) -> None:
    assert run("start", "account", "--id", "carol", "--input", '{"balance": 0}')[0] == 0
    deposit = '{"kind": "deposit", "amount": 1}'
    assert run("send", "carol", "command", deposit, "--id", "m-1")[0] == 0
    for other in ('{"kind": "deposit", "amount": 1.0}', '{"kind": "deposit", "amount": 100}'):
        code, out = run("send", "carol", "command", other, "--id", "m-1")
        assert code == 2 and "already delivered" in out and "'m-1'" in out, out
    code, out = run("send", "carol", "command", deposit, "--id", "m-1")  # the same: a no-op
    assert code == 0, out
    assert json.loads(run("get-event", "carol", "balance", "--timeout", "1")[1]) == 1
