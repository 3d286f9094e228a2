"""``loom schedules``: the app's schedules with their next fire time; ``--fire`` is one
idempotent pass."""

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
    fired = json.loads(out)["fired"]
    assert code == 0 and fired and all(f["started"] for f in fired)
    code, out = invoke(tmp_path, "schedules", "--fire", "--json")
    again = json.loads(out)
    repeated = [
        f for f in again["fired"] if f["execution_id"] in {g["execution_id"] for g in fired}
    ]
    assert repeated and not any(f["started"] for f in repeated)  # (a minute may have turned)
    listed = {s["name"]: s for s in again["schedules"]}
    assert listed["hourly"]["next_fire"].endswith(":00:00Z")
    assert listed["hourly"]["next_execution_id"].startswith("schedule:hourly@")
