"""``loom bulk cancel|resume|retry`` on the embedded SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from loom.cli import main

APP = "tests.functions.apps:app"


def invoke(tmp_path: Path, *args: str) -> tuple[int, str]:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path}/loom.db"]
    result = CliRunner().invoke(main, [*base, *args], catch_exceptions=False)
    return result.exit_code, result.output


def _gated(tmp_path: Path, *ids: str) -> None:
    for eid in ids:
        code, out = invoke(tmp_path, "start", "gated", "--input", '{"n": 1}', "--id", eid)
        assert code == 0 and "suspended" in out, out


def test_a_dry_run_lists_and_counts_then_the_cancel_is_recorded(tmp_path: Path) -> None:
    _gated(tmp_path, "g-1", "g-2")
    code, out = invoke(tmp_path, "bulk", "cancel", "--flow", "gated", "--dry-run")
    assert code == 0, out
    assert "g-2  gated  suspended  would cancel" in out
    assert out.strip().endswith("would cancel 2 of 2 execution(s)")
    code, out = invoke(tmp_path, "show", "g-1")
    assert "suspended" in out  # the dry run wrote nothing
    code, out = invoke(
        tmp_path,
        "bulk",
        "cancel",
        "--flow",
        "gated",
        "--reason",
        "closing",
        "--by",
        "dana",
        "--json",
    )
    report = json.loads(out)
    assert (report["count"], {i["outcome"] for i in report["items"]}) == (2, {"cancelled"})
    code, out = invoke(tmp_path, "show", "g-1")
    flat = " ".join(out.split())  # (the timeline wraps long lines)
    assert "dana (via local:" in flat and "closing" in flat


def test_a_resume_of_named_executions_and_a_retry(tmp_path: Path) -> None:
    _gated(tmp_path, "r-1", "r-2")
    code, out = invoke(
        tmp_path, "bulk", "resume", "--on", "go", "--payload", '{"name": "ann"}', "--id", "r-1",
        "--id", "nobody",
    )  # fmt: skip
    assert code == 0, out
    assert "r-1  gated  suspended  resume go/r-1:go: completed" in out
    assert "nobody    unknown  skipped: unknown execution" in out
    assert out.strip().endswith("did resume 1 of 2 execution(s)")
    invoke(tmp_path, "start", "echo", "--input", '{"n": "x"}', "--id", "bad")  # fails
    code, out = invoke(tmp_path, "bulk", "retry", "--status", "failed")
    assert "bad  echo  failed  fork bad.redrive-" in out and "did retry 1 of 1" in out


def test_bad_filters_are_refused_with_exit_2(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "bulk", "cancel", "--status", "completed")
    assert code == 2 and "cancel acts on executions that are running" in out
    code, out = invoke(tmp_path, "bulk", "cancel", "--from", "soon")
    assert code == 2 and "must be an age" in out
    code, out = invoke(tmp_path, "bulk", "resume", "--on", "loom.timer")
    assert code == 2 and "Loom's own" in out
