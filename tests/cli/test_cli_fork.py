"""``loom fork ID --from-step N`` on the embedded SQLite store, and ``loom show`` of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom.cli import main

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.functions.apps:app"


def invoke(tmp_path: Path, *args: str) -> tuple[int, str]:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path}/loom.db"]
    result = CliRunner().invoke(main, [*base, *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_fork_runs_the_rest_and_show_names_the_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("LOOM_TEST_DIR", str(tmp_path))
    assert invoke(tmp_path, "start", "gated", "--input", '{"n": 2}', "--id", "g")[0] == 0
    code, out = invoke(tmp_path, "fork", "g", "--from-step", "2", "--id", "g2")
    assert code == 0 and "g2" in out and "waiting on go" in out, out
    code, out = invoke(tmp_path, "show", "g2", "--json")
    shown = json.loads(out[out.index("{") :])
    first = shown["events"][0]
    assert first["forked_from"] == {"execution_id": "g", "step_id": "2", "seq": 4}
    assert [e["type"] for e in shown["events"]][1:] == [
        "EffectCompleted",
        "ExecutionForked",
        "ExecutionClaimed",
        "ExecutionSuspended",
    ]
    code, out = invoke(tmp_path, "show", "g2")
    assert code == 0 and "forked from g" in out
    code, out = invoke(tmp_path, "fork", "g", "--from-step", "9")
    assert code == 2 and "has no step '9'" in out
