"""The example end to end, with real processes: a SIGKILL mid-call, in doubt, verdict, replay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from examples.a2ui_callfunction.__main__ import _problems  # pyright: ignore[reportPrivateUsage]
from examples.a2ui_callfunction.demo import run_example


@pytest.mark.slow
async def test_the_example_runs_both_grains_crashes_recovers_and_replays(tmp_path: Path) -> None:
    lines: list[str] = []
    report = await run_example(tmp_path, say=lines.append)
    greet, submit = report.ids["greet"], report.ids["submit"]

    assert report.outputs[greet] == {"locale": "fr-FR", "greeting": "Bonjour"}
    assert report.refused == {"late duplicate": 409, "unsolicited": 409, "unsigned": 401}
    # The worker really died mid-call, and a fresh process parked the step in doubt.
    assert report.killed_exit == -signal.SIGKILL
    assert report.in_doubt["status"] == "in_doubt"
    assert report.in_doubt["effect"] == "a2ui.callFunction"
    assert report.in_doubt["idempotency_key"] == report.call_ids[submit] == f"{submit}:1"
    # The verdict came from the client's ledger: one submission, and the flow used it.
    assert report.submissions == 1
    assert report.outputs[submit]["confirmed"] is True
    assert report.outputs[submit]["submission_id"].startswith("sub-")
    # Replays from the logs agree and never reached the client.
    assert report.replays == {
        eid: {"status": "completed", "same_output": True} for eid in (greet, submit)
    }
    assert report.client_calls_during_replay == 0
    assert _problems(report) == []
    assert any("in_doubt" in line for line in lines)


@pytest.mark.slow
def test_the_command_takes_its_ports_and_leaves_no_temporary_folder(tmp_path: Path) -> None:
    """``python -m examples.a2ui_callfunction --http-port P --ws-port Q``: both servers (the
    one killed mid-call and the one that replaces it) listen on P and Q, and the temporary
    folder the example made is gone once it succeeded."""
    from tests import procs

    http, ws = procs.free_port(), procs.free_port()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
        "PYTHONPATH": f"{root}{os.pathsep}{root / 'functions'}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "examples.a2ui_callfunction", "--http-port", str(http),
         "--ws-port", str(ws)],
        cwd=root, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    servers = [ln for ln in done.stdout.splitlines() if "server pid" in ln and "http" in ln]
    assert len(servers) == 2 and all(f"http {http}, ws {ws}" in ln for ln in servers), servers
    assert "both grains completed" in done.stdout
    assert list(scratch.iterdir()) == []  # the example's folder was removed
