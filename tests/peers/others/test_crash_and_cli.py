"""Recovery after a real crash and the command line, as the peers' suites check them.

The crash tests run ``loom`` in a child process that SIGKILLs itself at a crash point
(``LOOM_CRASH_AT``), over SQLite on disk, and recover in this process: DBOS's
``test_recovery``, Restate's journal replay after a failover, AWS durable functions' replay
after an interrupted invocation. The command-line tests go through ``loom``'s own entry
point.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom.cli import main
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.wire import ExecutionPackage
from tests.delivery.kit import ROOT, run_loom
from tests.peers.others import apps

APP = "tests.peers.others.apps:app"
Run = Callable[..., tuple[int, str]]


@pytest.fixture
def side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The ledger file the child processes (and this one) append invocations to."""
    path = tmp_path / "side.txt"
    monkeypatch.setenv("LOOM_TEST_SIDE_FILE", str(path))
    apps.LEDGER.clear()
    yield path


def _lines(side: Path) -> list[str]:
    return side.read_text().splitlines() if side.exists() else []


async def _recover(db: Path, eid: str) -> tuple[Runtime, str]:
    runtime = Runtime(apps.app, SqliteEventStore(str(db)))
    result = await runtime.execute(ExecutionPackage(execution_id=eid, reason="sweep"))
    return runtime, result.status


@pytest.mark.slow
async def test_a_workflow_killed_after_a_step_resumes_without_running_it_again(
    tmp_path: Path, side: Path
):
    """DBOS ``test_recovery``: kill the process after step 2 of 3 committed; recovery runs
    step 3 only."""
    db = tmp_path / "loom.db"
    env = {"LOOM_CRASH_AT": "after_complete:2"}
    code = run_loom(
        APP, f"sqlite:///{db}", side, "start", "steps", "--input", "3", "--id", "k1", env=env
    )
    assert code == -signal.SIGKILL
    assert _lines(side) == ["echo:k1:1", "echo:k1:2"]
    runtime, status = await _recover(db, "k1")
    assert status == "completed"
    assert (await runtime.result("k1")).output == [0, 1, 2]
    assert _lines(side) == ["echo:k1:1", "echo:k1:2", "echo:k1:3"]
    await runtime.store.aclose()


@pytest.mark.slow
async def test_a_non_idempotent_step_killed_mid_call_parks_in_doubt_not_rerun(
    tmp_path: Path, side: Path
):
    """AWS durable ``StepSemantics.AtMostOncePerRetry`` / Restate's journaled ``ctx.run``:
    a step whose outcome a crash hid is not run again on its own. Loom parks it in doubt
    and an operator's verdict records what happened."""
    db = tmp_path / "loom.db"
    env = {"LOOM_CRASH_AT": "after_effect:1"}
    code = run_loom(
        APP, f"sqlite:///{db}", side, "start", "pay", "--input", "5", "--id", "k2", env=env
    )
    assert code == -signal.SIGKILL
    assert _lines(side) == ["charge:k2:1"]
    runtime, status = await _recover(db, "k2")
    assert status == "in_doubt"
    (doubt,) = (await runtime.result("k2")).in_doubt
    assert (doubt.step_id, doubt.effect, doubt.idempotency_key) == ("1", "charge", "k2:1")
    done = await runtime.verdict(
        "k2", "1", "performed", output="ch-seen", by="ops", episode=doubt.episode
    )
    assert (done.status, done.output) == ("completed", "ch-seen")
    assert _lines(side) == ["charge:k2:1"]
    await runtime.store.aclose()


@pytest.mark.slow
async def test_a_send_killed_midway_delivers_exactly_once(tmp_path: Path, side: Path):
    """DBOS ``test_send_recv`` under recovery: a sender killed after its send was recorded
    does not send it twice when it resumes."""
    db = tmp_path / "loom.db"
    url = f"sqlite:///{db}"
    runtime = Runtime(apps.app, SqliteEventStore(str(db)))
    await runtime.start("receiver", {"n": 2, "timeout": 3600}, execution_id="box")
    spec = json.dumps({"to": "box", "payloads": ["one"]})
    env = {"LOOM_CRASH_AT": "after_send"}
    code = run_loom(APP, url, side, "start", "sender", "--input", spec, "--id", "snd", env=env)
    assert code == -signal.SIGKILL
    status = (await runtime.execute(ExecutionPackage(execution_id="snd", reason="sweep"))).status
    assert status == "completed"
    state = await runtime.load_state("box")
    received = [e for e in await runtime.history("box") if e.type == "MessageReceived"]
    assert len(received) == 1, state
    await runtime.store.aclose()


@pytest.fixture
def run(tmp_path: Path, side: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    """``loom --app … --store …`` through its entry point, in this process."""
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path}/cli.db"]

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, [*base, *args], catch_exceptions=False)
        return result.exit_code, result.output

    return invoke


def test_cli_start_twice_with_one_id_runs_once(run: Run, side: Path):
    """DBOS/Restate idempotent start from the command line: the repeat reports, runs
    nothing."""
    code, out = run("start", "steps", "--input", "2", "--id", "c1")
    assert code == 0 and "completed" in out
    code, again = run("start", "steps", "--input", "2", "--id", "c1")
    assert code == 0 and "completed" in again
    assert _lines(side) == ["echo:c1:1", "echo:c1:2"]
    code, out = run("start", "steps", "--input", "3", "--id", "c1")
    assert code == 2 and "c1" in out


def test_cli_send_and_get_event(run: Run):
    """DBOS ``send``/``get_event`` from outside, through ``loom send`` and ``loom get-event``."""
    assert run("start", "publisher", "--input", "2", "--id", "c2")[0] == 0
    code, out = run("get-event", "c2", "progress")
    assert (code, json.loads(out)) == (0, 1)
    code, out = run("send", "c2", "go", "null")
    assert code == 0 and "completed" in out
    assert json.loads(run("get-event", "c2", "stage")[1]) == "done"
    code, out = run("get-event", "c2", "nothing", "--timeout", "0.1")
    assert code != 0 and "nothing" in out


def test_cli_cancel_and_list_by_status(run: Run):
    """DBOS ``cancel_workflow`` and ``list_workflows(status=…)`` from the command line."""
    run("start", "waits_forever", "--id", "c3")
    run("start", "steps", "--input", "1", "--id", "c4")
    code, out = run("cancel", "c3", "--reason", "no longer needed")
    assert code == 0 and "cancelled" in out
    code, out = run("ls", "--status", "cancelled", "--json")
    assert [row["execution_id"] for row in json.loads(out)] == ["c3"]
    code, out = run("cancel", "c4")
    assert code == 2 and "completed" in out


def test_cli_strict_resume_of_the_wrong_awakeable_is_refused(run: Run):
    """Restate refuses a completion for an unknown awakeable; ``loom resume --strict``
    refuses a resume no open gate waits for, naming the gate it does wait on."""
    run("start", "awakeable", "--id", "c5")
    code, out = run("resume", "c5", "--on", "calback", "--key", "c5:cb", "--strict")
    assert code == 2 and "callback" in out
    code, out = run("resume", "c5", "--on", "callback", "--key", "c5:cb", "--payload", "1")
    assert code == 0 and "completed" in out


def test_cli_fork_reruns_from_a_step(run: Run, side: Path):
    """DBOS ``fork_workflow`` from the command line: ``loom fork ID --from-step N``."""
    run("start", "steps", "--input", "3", "--id", "c6")
    code, out = run("fork", "c6", "--from-step", "2", "--id", "c6-f")
    assert code == 0 and "completed" in out
    assert _lines(side)[3:] == ["echo:c6-f:2", "echo:c6-f:3"]


def test_cli_send_to_an_unknown_execution_is_one_clear_line(run: Run):
    """DBOS raises on a send to a nonexistent workflow; the CLI says so, exit 2."""
    code, out = run("send", "ghost", "t", "1")
    assert code == 2 and "ghost" in out and "Traceback" not in out


@pytest.mark.slow
async def test_a_workflow_that_keeps_killing_its_worker_goes_to_the_dead_letters(
    tmp_path: Path, side: Path
):
    """DBOS ``max_recovery_attempts``: a workflow whose recoveries keep dying is moved to
    the dead-letter queue instead of being recovered forever; an operator re-drives it.
    Loom: execute calls that claim it and record nothing park it as ``poison``; ``loom
    retry`` (a dead-letter re-drive) runs it again."""
    from loom.ops.deadletters import find, redrive

    db = tmp_path / "loom.db"
    runtime = Runtime(apps.app, SqliteEventStore(str(db)), max_idle_claims=2)
    await runtime.start("steps", 1, execution_id="k4", run=False)
    for _ in range(2):
        code = run_loom(
            APP, f"sqlite:///{db}", side, "execute", "k4", env={"LOOM_CRASH_AT": "held"}
        )
        assert code == -signal.SIGKILL
    parked = await runtime.execute(ExecutionPackage(execution_id="k4", reason="sweep"))
    assert parked.status == "suspended" and (parked.parked_reason or "").startswith("poison")
    # Each dying call ran the idempotent step (same key) and died before recording it; the
    # third call ran nothing.
    assert _lines(side) == ["echo:k4:1"] * 2
    letters = await find(runtime, "poison")
    assert [row.execution_id for row in letters] == ["k4"]
    (plan,) = await redrive(runtime, letters, by="ops")
    assert plan.action == "retry"
    assert (await runtime.result("k4")).status == "completed"
    assert _lines(side) == ["echo:k4:1"] * 3
    await runtime.store.aclose()
