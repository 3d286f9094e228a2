"""Stored events and snapshots this release cannot read, on SQLite on disk.

Faults: during a rolling deploy an older worker reads a log a newer release appended to (an
event type it does not know); a damaged file holds a body that is no JSON; a snapshot was
written by a newer release (a field this one does not know) or is damaged. Each is written
into the database file directly, as the newer release or the damage would leave it, and
then read by real ``loom serve`` and CLI processes.

Promises checked: an unreadable event is a store error that names the execution, the seq
and what did not fit (HTTP 503 with ``Retry-After``, so a newer worker can take the
delivery; CLI exit 75), never a 500 or a traceback, and nothing is appended on top of a log
the worker cannot read. An unreadable snapshot costs a full read of the log and nothing
else: the execution resumes and completes without running a recorded step again.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from loom.events import event_from_json
from loom.kernel.fold import fold
from tests.faults import harness as h

APP = "tests.faults.audit.audit_app:app"
pytestmark = pytest.mark.slow  # real worker and CLI processes
EID = "g-1"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An execution waiting at its gate after one recorded step (seqs 1 to 4)."""
    env = h.env_for(tmp_path, f"sqlite:///{tmp_path}/loom.db", LOOM_APP=APP)
    started = h.cli(env, "start", "audit.gate", "--id", EID, "--input", "1")
    assert started.returncode == 0 and "suspended" in started.stdout, started.stderr
    return env


def _db(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "loom.db", isolation_level=None)


def _events(tmp_path: Path) -> list[tuple[int, str]]:
    with _db(tmp_path) as con:
        rows = con.execute("SELECT seq, body FROM events WHERE execution_id=? ORDER BY seq", (EID,))
        return list(rows)


def _append_newer_event(tmp_path: Path) -> int:
    """Append an event of a type a newer release records, as that release would."""
    seq = _events(tmp_path)[-1][0] + 1
    body = {"type": "ExecutionHibernated", "schema_version": 9, "seq": seq, "at": 1.0}
    con = _db(tmp_path)
    con.execute("INSERT INTO events VALUES (?, ?, ?)", (EID, seq, json.dumps(body)))
    con.execute("UPDATE executions SET last_seq=? WHERE id=?", (seq, EID))
    con.close()
    return seq


def _assert_names_it(text: str, seq: int, what: str) -> None:
    assert f"event {seq} of execution '{EID}'" in text, text
    assert what in text, text


def test_a_newer_releases_event_is_a_retryable_store_error_naming_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    seq = _append_newer_event(tmp_path)
    before = _events(tmp_path)
    with h.served(tmp_path, env) as base:
        for method, path, body in [
            ("GET", f"/executions/{EID}", None),
            ("POST", "/execute", {"executionPackage": {"execution_id": EID}}),
        ]:
            answer = h.call(base, method, path, body)
            assert answer.status == 503, (path, answer.body)
            assert answer.headers.get("Retry-After"), answer.headers
            assert answer.body["code"] == "unreadable_event"
            assert answer.body["details"]["seq"] == seq
            _assert_names_it(answer.body["message"], seq, "'ExecutionHibernated'")
        assert h.call(base, "GET", "/live").status == 200
        other = h.call(base, "POST", "/executions", {"flow": "audit.gate", "input": 2})
        assert other.status == 200 and other.body["status"] == "suspended", other.body
    for args in (["show", EID], ["resume", EID, "--on", "go", "--key", f"{EID}:go"]):
        run = h.cli(env, *args)
        assert run.returncode == 75, run.stdout + run.stderr
        assert "Traceback" not in run.stderr
        _assert_names_it(run.stderr, seq, "'ExecutionHibernated'")
    assert _events(tmp_path) == before, "something was appended to a log the worker cannot read"


def test_a_damaged_event_body_names_its_seq(tmp_path: Path, env: dict[str, str]) -> None:
    seq, body = _events(tmp_path)[2]
    con = _db(tmp_path)
    con.execute(
        "UPDATE events SET body=? WHERE execution_id=? AND seq=?",
        (body[: len(body) // 2], EID, seq),
    )
    con.close()
    run = h.cli(env, "execute", EID)
    assert run.returncode == 75, run.stdout + run.stderr
    _assert_names_it(run.stderr, seq, "Invalid JSON")
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("damage", ["newer", "garbage"])
def test_an_unreadable_snapshot_costs_a_full_read_not_the_execution(
    tmp_path: Path, env: dict[str, str], damage: str
) -> None:
    last = _events(tmp_path)[-1][0]
    if damage == "newer":  # the state as a newer release keeps it: one field more
        folded = fold([event_from_json(body) for _, body in _events(tmp_path)])
        head, _, tail = folded.to_json().partition("\n")
        state = json.dumps({**json.loads(head), "hibernation": {"since": 1.0}}) + "\n" + tail
    else:
        state = "\x00not a snapshot"
    con = _db(tmp_path)
    con.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)", (EID, last, state))
    con.close()
    run = h.cli(env, "resume", EID, "--on", "go", "--key", f"{EID}:go", "--payload", "3")
    assert run.returncode == 0, run.stdout + run.stderr
    shown = h.cli(env, "show", EID)
    assert shown.returncode == 0 and "completed" in shown.stdout, shown.stdout + shown.stderr
    assert "output=14" in shown.stdout, shown.stdout  # len("done:g-1:1") + 1 + 3
    assert h.Ledger(tmp_path / "ledger.txt").keys() == [f"{EID}:1"], "a recorded step ran again"


def test_replay_check_reads_the_log_behind_an_unreadable_snapshot(
    tmp_path: Path, env: dict[str, str]
) -> None:
    con = _db(tmp_path)
    con.execute("INSERT INTO snapshots VALUES (?, ?, ?)", (EID, 4, "\x00not a snapshot"))
    con.close()
    run = h.cli(env, "replay-check")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
