"""The saga and fan-out examples, run with the commands their docstrings (and the README)
show: ``loom start``, ``loom cancel``, ``loom show`` on the embedded SQLite default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from examples import saga

from loom.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)  # the examples are importable from the checkout
    runner = CliRunner()
    store = f"sqlite:///{tmp_path}/loom.db"

    def invoke(app: str, *args: str) -> tuple[int, str]:
        result = runner.invoke(
            main, ["--app", app, "--store", store, *args], catch_exceptions=False
        )
        return result.exit_code, result.output

    return invoke


def show(run, app: str, eid: str) -> dict:
    code, out = run(app, "show", eid, "--json")
    assert code == 0, out
    return json.loads(out)


def test_the_saga_compensates_when_cancelled_from_the_cli(run):
    saga.BOOKED.clear()
    app = "examples.saga:app"
    code, out = run(app, "start", "trip.book", "--input", '{"trip_id": "t-1"}', "--id", "t-1")
    assert code == 0 and "suspended" in out, out
    code, out = run(app, "cancel", "t-1", "--reason", "changed my mind")
    assert code == 0 and "cancelled" in out, out
    assert saga.BOOKED == ["hotel+t-1", "flight+t-1", "flight-F-t-1", "hotel-H-t-1"]
    doc = show(run, app, "t-1")
    assert doc["status"] == "cancelled"
    kinds = [e["type"] for e in doc["events"]]
    assert kinds[-1] == "ExecutionCancelled" and "CancelDelivered" in kinds
    assert doc["events"][-1]["by"].startswith("local:")


def test_the_fanout_gathers_its_children_and_shows_their_lineage(run):
    app = "examples.fanout:app"
    code, out = run(
        app, "start", "report.all", "--input", '["emea", "apac"]', "--id", "r-1", "--wait", "5"
    )
    assert code == 0 and "completed" in out, out
    doc = show(run, app, "r-1")
    assert doc["output"]["grand_total"] == sum(r["total"] for r in doc["output"]["regions"])
    assert [r["region"] for r in doc["output"]["regions"]] == ["emea", "apac"]
    children = [e["child_id"] for e in doc["events"] if e["type"] == "ChildStarted"]
    assert children == ["r-1.child.1", "r-1.child.2"]
    code, out = run(app, "show", "r-1.child.1")
    assert code == 0 and "parent r-1 (step 1)" in out, out
    code, out = run(app, "show", "r-1")
    assert "children r-1.child.1, r-1.child.2" in out, out


def test_a_cancel_without_the_app_is_recorded_and_a_worker_with_it_cleans_up(run):
    saga.BOOKED.clear()
    app = "examples.saga:app"
    run(app, "start", "trip.book", "--input", '{"trip_id": "t-9"}', "--id", "t-9")
    code, out = run(None, "cancel", "t-9", "--reason", "ops")
    assert code == 0 and "running" in out, out  # recorded; nothing here can run the flow
    assert saga.BOOKED == ["hotel+t-9", "flight+t-9"]
    code, out = run(app, "execute", "t-9")  # what the sweep's dispatch makes a worker do
    assert code == 0 and "cancelled" in out, out
    assert saga.BOOKED[2:] == ["flight-F-t-9", "hotel-H-t-9"]
