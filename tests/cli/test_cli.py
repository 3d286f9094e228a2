"""The ``loom`` command line on the embedded SQLite default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom.cli import main

ROOT = Path(__file__).resolve().parents[2]
ORDER = json.dumps({"order_id": "o-1", "items": ["book"], "cooling_off_s": 0.05})


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)  # examples.orders is importable from the checkout
    runner = CliRunner()
    base = ["--app", "examples.orders:app", "--store", f"sqlite:///{tmp_path}/loom.db"]

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, [*base, *args], catch_exceptions=False)
        return result.exit_code, result.output

    return invoke


def show(run, eid: str) -> dict:
    code, out = run("show", eid, "--json")
    assert code == 0, out
    return json.loads(out)


def test_start_gate_resume_timer_and_show(run):
    code, out = run(
        "start", "order.fulfil", "--input", ORDER, "--id", "c1", "--capability", "payments"
    )
    assert code == 0 and "suspended" in out and "approval" in out
    code, out = run(
        "resume",
        "c1",
        "--on",
        "approval",
        "--key",
        "c1:approval#1",
        "--payload",
        '{"by": "kim"}',
        "--wait",
        "2",
    )
    assert code == 0 and "completed" in out, out
    doc = show(run, "c1")
    assert doc["status"] == "completed" and doc["output"]["approved_by"] == "kim"
    assert [e["seq"] for e in doc["events"]] == list(range(1, len(doc["events"]) + 1))
    assert {"seq", "type"} <= set(doc["events"][0])
    code, out = run("show", "c1")
    assert code == 0 and "ExecutionCompleted" in out and "effect calls" in out
    code, out = run("ls", "--status", "completed")
    assert code == 0 and "c1" in out


def test_execute_a_due_timer_after_the_process_that_armed_it_is_gone(run):
    run("start", "order.fulfil", "--input", ORDER, "--id", "c2", "--capability", "payments")
    run("resume", "c2", "--on", "approval", "--key", "c2:approval#1")  # no --wait
    assert show(run, "c2")["status"] == "suspended"
    import time

    time.sleep(0.1)
    code, out = run("execute", "c2")  # a fresh process finds the due timer in the store
    assert code == 0 and "completed" in out


def test_verdict_and_in_doubt_listing(run, tmp_path: Path):
    from loom import events as ev
    from loom.store import AppendRequest, SqliteEventStore

    # What a worker killed mid-charge leaves behind: an intent record with no outcome.
    store = SqliteEventStore(tmp_path / "loom.db")
    import asyncio

    async def forge() -> None:
        await store.create(
            ev.ExecutionStarted(
                execution_id="c5",
                flow="order.express",
                input={"order_id": "z", "items": []},
                capabilities=["payments"],
            )
        )
        await store.append(
            AppendRequest(
                "c5",
                1,
                [
                    ev.EffectCompleted(
                        seq=2,
                        step_id="1",
                        effect="pricing.quote",
                        output={"order_id": "z", "total": 0},
                    ),
                    ev.EffectStarted(
                        seq=3, step_id="2", effect="payments.charge", idempotency_key="c5:2"
                    ),
                ],
            )
        )

    asyncio.run(forge())
    code, out = run("execute", "c5")
    assert code == 0 and "in_doubt" in out
    code, out = run("ls", "--status", "in_doubt")
    assert "c5" in out and "payments.charge" in out and "c5:2" in out
    code, out = run(
        "verdict",
        "c5",
        "2",
        "performed",
        "--output",
        '{"charge_id": "ch_1", "amount": 0}',
        "--by",
        "ops",
    )
    assert code == 0 and "completed" in out, out


@pytest.mark.parametrize(
    "args,message",
    [
        (("start", "nope", "--input", "1"), "unknown flow 'nope'"),
        (("start", "order.fulfil", "--input", '{"items": 3}'), "input for flow 'order.fulfil'"),
        (("start", "order.fulfil", "--input", "{bad json"), "--input is not valid JSON"),
        (("resume", "ghost", "--on", "a", "--key", "b"), "unknown execution 'ghost'"),
        (("show", "ghost"), "unknown execution 'ghost'"),
    ],
)
def test_bad_input_is_a_clear_error_and_nothing_is_written(run, args, message):
    code, out = run(*args)
    assert code == 2
    assert message in out
    code, out = run("ls")
    assert "0 execution(s)" in out


def test_verdict_for_a_step_not_in_doubt(run):
    run(
        "start",
        "order.express",
        "--input",
        '{"order_id": "a", "items": []}',
        "--id",
        "c6",
        "--capability",
        "payments",
    )
    code, out = run("verdict", "c6", "3", "performed", "--output", "{}")
    assert code == 2 and "not in doubt" in out


@pytest.mark.slow
def test_loom_demo_runs_end_to_end_in_a_fresh_process(tmp_path: Path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "TMPDIR": str(temp)}
    proc = subprocess.run(
        [sys.executable, "-m", "loom", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo flows completed: 4 of 4" in proc.stdout
    assert "balances published: [115, 50]" in proc.stdout  # the entity section
    assert "in_doubt" in proc.stdout and "EffectVerdict" in proc.stdout
    assert not list(temp.glob("loom-demo-*")), "the demo left its store behind"
