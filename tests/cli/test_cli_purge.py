"""``loom purge --older-than`` on the embedded SQLite store (with its blob directory)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom.cli import main

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.functions.test_tasks_target:app"


def invoke(tmp_path: Path, *args: str) -> tuple[int, str]:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path}/loom.db"]
    result = CliRunner().invoke(main, [*base, *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_purge_deletes_finished_executions_and_frees_their_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    big = json.dumps("x" * 300_000)  # over the payload limit: stored as a blob
    assert invoke(tmp_path, "start", "echo", "--input", big, "--id", "e1")[0] == 0
    assert invoke(tmp_path, "start", "gate", "--input", '"g"', "--id", "g1")[0] == 0
    assert (tmp_path / "blobs" / "e1").is_dir()
    code, out = invoke(tmp_path, "purge", "--older-than", "30d")
    # The summary is the last line (a logging handler another test installed may add some).
    assert (code, out.strip().splitlines()[-1]) == (0, "purged 0 execution(s) and 0 blob(s)")
    time.sleep(1.1)
    code, out = invoke(tmp_path, "purge", "--older-than", "1s", "--json")
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["purged"], summary["complete"]) == (1, True) and summary["blobs"] >= 1
    assert not (tmp_path / "blobs" / "e1").exists()
    assert invoke(tmp_path, "show", "e1")[0] != 0
    assert invoke(tmp_path, "show", "g1")[0] == 0  # waiting on its gate: kept
    code, out = invoke(tmp_path, "start", "echo", "--input", '"again"', "--id", "e1")
    assert code == 0, out
    code, out = invoke(tmp_path, "show", "e1", "--json")
    shown = json.loads(out[out.index("{") :])
    assert (shown["status"], shown["output"], len(shown["events"])) == ("completed", "again", 4)


def test_a_bad_age_is_a_usage_error(tmp_path: Path) -> None:
    code, _ = invoke(tmp_path, "purge", "--older-than", "forever")
    assert code == 2
