"""``loom retry --status … [--flow] [--dry-run]`` on the embedded SQLite store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from loom.cli import main
from tests.flowcontrol.apps import CALLS

APP = "tests.flowcontrol.apps:app"


def invoke(tmp_path: Path, *args: str) -> tuple[int, str]:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path}/loom.db"]
    result = CliRunner().invoke(main, [*base, *args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def clean_calls() -> Iterator[None]:
    CALLS.ran.clear()
    yield
    CALLS.bug = False


def test_bulk_retry_of_failed_executions_with_a_dry_run_first(tmp_path: Path) -> None:
    CALLS.bug = True
    for eid, flow in (("a", "pipeline"), ("b", "pipeline"), ("c", "boom")):
        assert invoke(tmp_path, "start", flow, "--input", "3", "--id", eid)[0] == 1  # failed
    CALLS.bug = False
    code, out = invoke(tmp_path, "retry", "--status", "failed", "--flow", "pipeline", "--dry-run")
    assert code == 0, out
    assert "a  pipeline  would fork as a.redrive-5" in out and "would re-drive 2 of 2" in out
    assert "c " not in out
    code, out = invoke(tmp_path, "ls")
    assert out.strip().endswith("3 execution(s)")  # the dry run started nothing
    code, out = invoke(tmp_path, "retry", "--status", "failed", "--json")
    lines = [json.loads(line) for line in out.strip().splitlines()]
    assert {(r["execution_id"], r["action"], r["status"]) for r in lines} == {
        ("a", "fork", "suspended"),
        ("b", "fork", "suspended"),
        ("c", "fork", "completed"),
    }
    code, out = invoke(tmp_path, "retry", "--status", "failed")
    assert out.count("already re-driven") == 3 and "re-drove 3 of 3" in out


def test_bulk_retry_of_failed_redrives_starts_nothing_new(tmp_path: Path) -> None:
    """As the README says: a second bulk retry starts nothing new, even when the first one's
    re-drives failed again; ``loom retry ID`` re-drives one of them."""
    CALLS.bug = True
    assert invoke(tmp_path, "start", "pipeline", "--input", "3", "--id", "a")[0] == 1
    code, out = invoke(tmp_path, "retry", "--status", "failed")
    assert "a  pipeline  fork as a.redrive-5: failed" in out and "re-drove 1 of 1" in out
    for _ in range(2):
        code, out = invoke(tmp_path, "retry", "--status", "failed")
        assert code == 0, out
        assert "already re-driven as a.redrive-5 (failed)" in out and "1 of 1" in out
        assert "a.redrive-5  pipeline  fork" not in out
        assert invoke(tmp_path, "ls")[1].strip().endswith("2 execution(s)")
    CALLS.bug = False
    code, out = invoke(tmp_path, "retry", "a.redrive-5")
    assert code == 0, out
    assert "a.redrive-5  pipeline  fork as a.redrive-5.redrive-" in out and "suspended" in out
    assert invoke(tmp_path, "ls")[1].strip().endswith("3 execution(s)")


def test_retry_needs_an_id_or_a_status(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "retry")
    assert code == 2 and "--status" in out
    code, out = invoke(tmp_path, "retry", "x", "--status", "poison")
    assert code == 2
    code, out = invoke(tmp_path, "retry", "x", "--dry-run")
    assert code == 2 and "go with --status" in out
    code, out = invoke(tmp_path, "retry", "--status", "failed", "--since", "someday")
    assert code == 2 and "--since" in out
