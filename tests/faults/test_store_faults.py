"""Store faults injected into real worker and CLI processes, between an effect and the
recording of its outcome (where a lost outcome would hurt).

Faults: disk full (a size-limited tmpfs filled to its last block), a database locked by a
second OS process past the busy timeout, a read-only file system (a read-only bind mount),
and a blob store that refuses writes (its own full tmpfs). For each, around an idempotent
and a non-idempotent effect: every invocation is counted in a side ledger, the caller gets a
clear retryable answer (503 with ``Retry-After``, or CLI exit 75) within the deadline and
never a 500, the flow's ``except Exception`` never sees the failure, and once the fault
clears the execution ends completed (the idempotent step re-invoked with the same key) or
in doubt on the right step (the non-idempotent one, invoked once).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.faults import harness as h

pytestmark = pytest.mark.slow

EFFECTS = ["side.idempotent", "side.once"]
RESPONSIVE = 1.5  # seconds: "about a second" for unrelated requests, with CI margin


def _start_body(eid: str, effect: str, big: bool = False) -> dict[str, Any]:
    return {"flow": "fault.catching", "input": {"effect": effect, "big": big}, "execution_id": eid}


def _package(eid: str) -> dict[str, Any]:
    return {"executionPackage": {"execution_id": eid, "flow": "fault.catching", "reason": "start"}}


def _assert_retryable(answer: h.Answer) -> None:
    assert answer.status == 503, answer.body
    assert int(answer.headers["Retry-After"]) >= 1
    assert answer.body["code"] in ("store_unavailable", "store"), answer.body
    assert answer.body["message"]
    assert answer.seconds < h.DEADLINE


def _no_500(answers: list[h.Answer]) -> None:
    assert all(a.status < 500 or a.status == 503 for a in answers), [
        (a.status, a.body) for a in answers
    ]


def _assert_settled(base: str, eid: str, effect: str, ledger: h.Ledger) -> list[h.Answer]:
    """After the fault: one more execute settles it; check the outcome and the ledger."""
    key = f"{eid}:1"
    again = h.call(base, "POST", "/execute", _package(eid))
    assert again.status == 200, again.body
    view = h.call(base, "GET", f"/executions/{eid}")
    types = [e["type"] for e in view.body["history"]]
    assert "EffectFailed" not in types and "ExecutionFailed" not in types, types
    if effect == "side.once":
        assert again.body["status"] == "in_doubt", again.body
        assert [d["step_id"] for d in again.body["in_doubt"]] == ["1"]
        assert ledger.keys().count(key) == 1  # never invoked again on its own
    else:
        assert again.body["status"] == "completed", again.body
        assert again.body["output"] == {"result": f"DONE:{key}".upper()[:40]}
        assert ledger.keys().count(key) == 2  # re-invoked once, with the same key
    return [again, view]


def _mid_step(
    base: str,
    tmp: Path,
    eid: str,
    effect: str,
    inject: Callable[[], object],
    *,
    big: bool = False,
    during: Callable[[], list[h.Answer]] = list,
) -> list[h.Answer]:
    """Start ``eid``; inject the fault after its effect ran; return the answers seen."""
    gates = h.Gates(tmp / "gates")
    key = f"{eid}:1"
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(h.call, base, "POST", "/executions", _start_body(eid, effect, big))
        gates.wait_ran(key)
        inject()
        gates.release(key)
        seen = during()
        first = pending.result(timeout=h.DEADLINE + 5)
    _assert_retryable(first)
    return [first, *seen]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with h.tmpfs(tmp_path / "disk", "4m") as mounted:
        yield mounted


@pytest.mark.parametrize("effect", EFFECTS)
def test_disk_full_while_recording_an_outcome(tmp_path: Path, disk: Path, effect: str) -> None:
    env = h.env_for(tmp_path, f"sqlite:///{disk / 'loom.db'}")
    ledger = h.Ledger(tmp_path / "ledger.txt")
    fillers: list[Path] = []
    with h.served(tmp_path, env) as base:
        db = disk / "loom.db"
        answers = _mid_step(
            base, tmp_path, "df-1", effect, lambda: fillers.append(h.fill_with_wal(disk, db))
        )
        start = h.call(base, "POST", "/executions", _start_body("df-2", effect))
        _assert_retryable(start)  # a start on a full disk is refused, retryably
        assert ledger.keys() == ["df-1:1"]
        fillers[0].unlink()  # the fault clears
        answers += [start, *_assert_settled(base, "df-1", effect, ledger)]
    _no_500(answers)


@pytest.mark.parametrize("effect", EFFECTS)
def test_a_lock_held_by_another_process(tmp_path: Path, effect: str) -> None:
    db = tmp_path / "db" / "loom.db"
    env = h.env_for(tmp_path, f"sqlite:///{db}", LOOM_SQLITE_BUSY_TIMEOUT="3")
    ledger = h.Ledger(tmp_path / "ledger.txt")
    with h.served(tmp_path, env) as base, contextlib.ExitStack() as faults:
        other = h.call(base, "POST", "/executions", {"flow": "fault.quick", "input": "other"})
        assert other.status == 200, other.body
        other_id = other.body["execution_id"]

        def during() -> list[h.Answer]:
            # While an execute waits on the lock, unrelated requests answer at once.
            time.sleep(0.5)
            quick = [
                h.call(base, "GET", "/live"),
                h.call(base, "GET", f"/executions/{other_id}"),
                h.call(base, "GET", "/openapi.json"),
            ]
            assert all(a.status == 200 for a in quick), [(a.status, a.body) for a in quick]
            assert max(a.seconds for a in quick) < RESPONSIVE, [a.seconds for a in quick]
            health = h.call(base, "GET", "/health")
            assert health.status == 503 and health.body["error"]["details"]["reason"] == "busy"
            assert health.seconds < RESPONSIVE + 2.0
            return [*quick, health]

        holder = lambda: faults.enter_context(h.lock_holder(db))  # noqa: E731
        answers = _mid_step(base, tmp_path, "lk-1", effect, holder, during=during)
        faults.close()  # the other process lets go
        assert h.call(base, "GET", "/health").status == 200
        answers += _assert_settled(base, "lk-1", effect, ledger)
    _no_500(answers)


@pytest.mark.parametrize("effect", EFFECTS)
def test_the_cli_exits_75_naming_the_store_error(tmp_path: Path, effect: str) -> None:
    db = tmp_path / "db" / "loom.db"
    env = h.env_for(tmp_path, f"sqlite:///{db}", LOOM_SQLITE_BUSY_TIMEOUT="1")
    gates, ledger = h.Gates(tmp_path / "gates"), h.Ledger(tmp_path / "ledger.txt")
    argv = [sys.executable, "-m", "loom", "start", "fault.catching", "--id", "c-1"]
    argv += ["--input", json.dumps({"effect": effect})]
    proc = subprocess.Popen(
        argv, env={**h.os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        gates.wait_ran("c-1:1")
        with h.lock_holder(db):
            gates.release("c-1:1")
            _, err = proc.communicate(timeout=h.DEADLINE)
            assert proc.returncode == 75, err
            lines = err.strip().splitlines()
            assert len(lines) == 1 and "store_unavailable" in lines[0], err
            busy = h.cli(env, "start", "fault.quick", "--id", "c-2", "--input", '"x"')
            assert busy.returncode == 75 and len(busy.stderr.strip().splitlines()) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert h.cli(env, "execute", "c-1").returncode == 0
    shown = json.loads(h.cli(env, "show", "c-1", "--json").stdout)
    state = shown.get("execution", shown)
    if effect == "side.once":
        assert state["status"] == "in_doubt" and ledger.keys() == ["c-1:1"]
    else:
        assert state["status"] == "completed" and ledger.keys() == ["c-1:1", "c-1:1"]
        assert "caught" not in json.dumps(state["output"])


def test_a_read_only_database_answers_503_with_the_reason(tmp_path: Path) -> None:
    rw = tmp_path / "rw"
    env_rw = h.env_for(tmp_path, f"sqlite:///{rw / 'loom.db'}")
    assert h.cli(env_rw, "start", "fault.quick", "--id", "pre", "--input", '"x"').returncode == 0
    ledger = h.Ledger(tmp_path / "ledger.txt")
    with h.read_only_view(rw, tmp_path / "ro") as ro:
        env = h.env_for(tmp_path, f"sqlite:///{ro / 'loom.db'}")
        bad = h.cli(env, "start", "fault.quick", "--id", "ro-cli", "--input", '"x"')
        assert bad.returncode == 75 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        with h.served(tmp_path, env) as base:
            health = h.call(base, "GET", "/health")
            assert health.status == 503, health.body
            assert health.body["error"]["details"]["reason"] in ("read_only", "cannot_open")
            start = h.call(base, "POST", "/executions", _start_body("ro-1", "side.once"))
            _assert_retryable(start)
            assert ledger.keys() == []  # refused before anything ran
            h.make_writable(ro)  # the fault clears; the worker reopens its connections
            assert h.call(base, "GET", "/health").status == 200
            h.Gates(tmp_path / "gates").release("ro-1:1")
            done = h.call(base, "POST", "/executions", _start_body("ro-1", "side.once"))
            assert done.status == 200 and done.body["status"] == "completed", done.body
        _no_500([health, start, done])
    assert ledger.keys() == ["ro-1:1"]


@pytest.mark.parametrize("effect", EFFECTS)
def test_a_blob_store_that_refuses_writes(tmp_path: Path, effect: str) -> None:
    with h.tmpfs(tmp_path / "blobs", "64k") as blobs:
        env = h.env_for(
            tmp_path, f"sqlite:///{tmp_path / 'db' / 'loom.db'}", LOOM_BLOBS=f"file://{blobs}"
        )
        ledger = h.Ledger(tmp_path / "ledger.txt")
        with h.served(tmp_path, env) as base:
            # The output (300 KiB) does not fit the 64 KiB blob store: the write is refused.
            answers = _mid_step(base, tmp_path, "bl-1", effect, lambda: None, big=True)
            assert ledger.keys() == ["bl-1:1"]
            h.resize(blobs, "4m")  # the fault clears
            answers += _assert_settled_big(base, "bl-1", effect, ledger)
        _no_500(answers)


def _assert_settled_big(base: str, eid: str, effect: str, ledger: h.Ledger) -> list[h.Answer]:
    key = f"{eid}:1"
    again = h.call(base, "POST", "/execute", _package(eid))
    assert again.status == 200, again.body
    if effect == "side.once":
        assert again.body["status"] == "in_doubt" and ledger.keys() == [key]
    else:
        assert again.body["status"] == "completed", again.body
        assert again.body["output"] == {"result": (f"done:{key}" + "x" * 40)[:40].upper()}
        assert ledger.keys() == [key, key]
    return [again]
