"""``loom schedules``: every schedule with its next fire time; ``--fire`` is one idempotent
pass; the subcommands make and change schedules at run time."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from loom.cli import main

APP = "tests.flowcontrol.schedule_app:app"


def invoke(tmp_path: Path, *args: str) -> tuple[int, str]:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path}/loom.db"]
    result = CliRunner().invoke(main, [*base, *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_schedules_lists_and_fires_once(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "schedules")
    assert code == 0 and out.strip().endswith("3 schedule(s)")
    assert "every-5  */5 * * * * (UTC)  flow report  next " in out
    assert "minutely  * * * * * (Asia/Kolkata)" in out
    code, out = invoke(tmp_path, "schedules", "--fire", "--json")
    assert code == 0 and json.loads(out)["fired"] == []  # first seen now: no tick before it
    # A schedule made with --start-at 0 takes the ticks of the grace window.
    code, out = invoke(tmp_path, "schedules", "create", "back", "* * * * *", "--flow", "report",
                       "--start-at", "0")  # fmt: skip
    assert code == 0 and "(run time)" in out
    code, out = invoke(tmp_path, "schedules", "--fire", "--json")
    fired = [f for f in json.loads(out)["fired"] if f["schedule"] == "back"]
    assert code == 0 and len(fired) >= 5 and all(f["started"] for f in fired)
    code, out = invoke(tmp_path, "schedules", "--fire", "--json")
    again = json.loads(out)
    repeated = [
        f for f in again["fired"] if f["execution_id"] in {g["execution_id"] for g in fired}
    ]
    assert repeated and not any(f["started"] for f in repeated)  # (a minute may have turned)
    listed = {s["name"]: s for s in again["schedules"]}
    assert listed["hourly"]["next_fire"].endswith(":00:00Z")
    assert listed["hourly"]["next_execution_id"].startswith("schedule:hourly@")


def test_schedules_are_made_and_changed_from_the_command_line(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "schedules", "create", "nightly", "0 2 * * *", "--flow",
                       "report", "--input", '{"kind": "n"}', "--json")  # fmt: skip
    made = json.loads(out)
    assert code == 0 and (made["name"], made["input"], made["declared"]) == (
        "nightly",
        {"kind": "n"},
        False,
    )
    code, out = invoke(tmp_path, "schedules", "update", "nightly", "--cron", "0 3 * * *")
    assert code == 0 and "0 3 * * * (UTC)" in out
    code, out = invoke(tmp_path, "schedules", "pause", "nightly", "--note", "freeze")
    assert code == 0 and "paused" in out
    code, out = invoke(tmp_path, "schedules", "show", "nightly", "--json")
    assert json.loads(out)["note"] == "freeze"
    code, out = invoke(tmp_path, "schedules", "unpause", "nightly")
    assert code == 0 and "next " in out
    code, out = invoke(tmp_path, "schedules", "trigger", "nightly")
    assert code == 0 and "schedule:nightly#trigger-" in out and "started" in out
    code, out = invoke(tmp_path, "schedules", "backfill", "nightly", "--start",
                       "2026-01-01T00:00:00Z", "--end", "2026-01-03T00:00:00Z")  # fmt: skip
    assert code == 0 and out.count("started") == 2 and "2 tick(s)" in out
    code, out = invoke(tmp_path, "schedules", "delete", "nightly")
    assert code == 0 and "deleted schedule nightly" in out
    code, out = invoke(tmp_path, "schedules")
    assert "nightly" not in out
    result = CliRunner().invoke(
        main,
        ["--app", APP, "--store", f"sqlite:///{tmp_path}/loom.db", "schedules", "delete", "hourly"],
    )
    assert result.exit_code != 0 and "declared in the app's code" in result.output
