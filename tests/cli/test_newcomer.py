"""The command line as a new user meets it: exit codes, one-line errors, help texts, a
resume no gate waits for, Ctrl-C, ``ls --json``, and tables that fit 80 columns."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom import __version__
from loom.cli import main

ROOT = Path(__file__).resolve().parents[2]
ORDER = json.dumps({"order_id": "n-1", "items": ["book"], "cooling_off_s": 0.05})
EPOCH_FLOAT = re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b")


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    store = ["--store", f"sqlite:///{tmp_path}/loom.db"]

    def invoke(*args: str, app: str = "examples.orders:app") -> tuple[int, str, str]:
        result = runner.invoke(main, ["--app", app, *store, *args], catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return invoke


def _events(run, eid: str) -> list[str]:
    code, out, _ = run("show", eid, "--json")
    assert code == 0
    return [e["type"] for e in json.loads(out)["events"]]


def test_version_and_help_texts(run) -> None:
    code, out, _ = run("--version")
    assert code == 0 and __version__ in out
    _, out, _ = run("start", "--help")
    assert "repeat it" in " ".join(out.split())
    _, out, _ = run("serve", "--help")
    assert "LOOM_RESUME_SECRET" in out


def test_start_exits_non_zero_when_the_execution_failed(run) -> None:
    code, out, _ = run("start", "boom", "--input", '"no luck"', app="tests.cli.newcomer_app:app")
    assert code == 1 and "failed" in out and "no luck" in out


def test_a_validation_error_is_one_line_exit_2(run) -> None:
    code, _, err = run("start", "order.fulfil", "--input", '{"order_id": 1}')
    assert code == 2
    assert err.count("\n") == 1, err
    assert "order_id: Input should be a valid string" in err and "items: Field required" in err


def test_a_configuration_error_exits_2(run, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--store", "bogus://x", "ls"])
    assert result.exit_code == 2 and "no backend for 'bogus://x'" in result.stderr
    code, _, err = run("start", "x", app="examples.orders:nope")
    assert code == 2 and "has no attribute 'nope'" in err


def test_resume_no_gate_waits_for_is_buffered_with_a_warning_or_refused(run) -> None:
    code, _, _ = run("start", "order.fulfil", "--input", ORDER, "--id", "n-1")
    assert code == 0
    before = _events(run, "n-1")
    code, out, err = run(
        "resume", "n-1", "--on", "approvall", "--key", "n-1:approval#1", "--strict"
    )
    assert code == 2 and "no open gate 'approvall'" in err and "'approval'" in err
    assert _events(run, "n-1") == before, "a refused resume wrote something"
    code, out, err = run("resume", "n-1", "--on", "approvall", "--key", "n-1:approval#1")
    assert code == 0 and "no open gate 'approvall'" in err and "buffered" in err
    assert "--strict" in err and "suspended" in out
    assert _events(run, "n-1") == [*before, "ExecutionResumed"]
    # The right gate: no warning.
    code, out, err = run("resume", "n-1", "--on", "approval", "--key", "n-1:approval#1")
    assert code == 0 and err == ""


def test_ls_json_and_tables_fit_80_columns_with_readable_times(run) -> None:
    run("start", "order.fulfil", "--input", ORDER, "--id", "a-rather-long-execution-id-0001")
    run("start", "boom", "--input", '"x"', "--id", "n-2", app="tests.cli.newcomer_app:app")
    code, out, _ = run("ls", "--json")
    assert code == 0
    rows = {r["execution_id"]: r for r in json.loads(out)}
    assert rows["n-2"]["status"] == "failed" and rows["n-2"]["flow"] == "boom"
    assert rows["a-rather-long-execution-id-0001"]["in_doubt"] == []
    for args in (("ls",), ("show", "a-rather-long-execution-id-0001")):
        code, out, _ = run(*args)
        assert code == 0
        # The status line may be longer (a terminal wraps it); every table row fits.
        for line in out.splitlines()[1 if args[0] == "show" else 0 :]:
            assert len(line) <= 80, line
        assert not EPOCH_FLOAT.search(out), out


@pytest.mark.slow
@pytest.mark.parametrize("command", ["start", "execute"])
def test_ctrl_c_says_the_execution_still_runs_and_how_to_continue(
    tmp_path: Path, command: str
) -> None:
    mark = tmp_path / "mark"
    base = [sys.executable, "-m", "loom", "--app", "tests.cli.newcomer_app:app"]
    base += ["--store", f"sqlite:///{tmp_path}/loom.db"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOOM_TEST_MARK": str(mark)}
    if command == "start":
        argv = [*base, "start", "slow", "--input", "60", "--id", "cc-1"]
    else:
        seeded = subprocess.run(
            [sys.executable, "-c", _SEED, f"sqlite:///{tmp_path}/loom.db"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert seeded.returncode == 0, seeded.stderr
        argv = [*base, "execute", "cc-1"]
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert mark.exists(), proc.communicate(timeout=10)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = " ".join(err.decode().split())
    assert proc.returncode == 130, text
    assert "execution 'cc-1' is still running" in text and "loom execute cc-1" in text
    assert "Aborted!" not in text


_SEED = """
import asyncio, sys
from loom.config import open_store
from loom.runtime import Runtime
from tests.cli.newcomer_app import app
asyncio.run(Runtime(app, open_store(sys.argv[1])).start("slow", 60, execution_id="cc-1", run=False))
"""


@pytest.mark.parametrize("strict", [[], ["--strict"]])
def test_a_resume_after_the_gates_timeout_is_refused_naming_it(run, strict: list[str]) -> None:
    app = "tests.cli.newcomer_app:app"
    code, out, _ = run("start", "deadline", "--input", "0.05", "--id", "d-1", app=app)
    assert code == 0 and "suspended" in out
    time.sleep(0.2)  # the deadline passes; nothing has run the timer
    resume = ("resume", "d-1", "--on", "answer", "--key", "d-1", *strict)
    code, _, err = run(*resume, app=app)
    assert code == 2 and "gate 'answer'" in err and "timed out at" in err, err
    code, out, _ = run("execute", "d-1", app=app)  # the timer's call: the timeout recorded
    assert code == 0 and "suspended" in out, out  # now on its gate 'after'
    code, _, err = run(*resume, app=app)  # (--strict: not "no open gate")
    assert code == 2 and "gate 'answer'" in err and "timed out at" in err, err
