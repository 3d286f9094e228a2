"""``loom start --queue`` and ``loom queues``: a start on a full queue waits (runs nothing),
and the listing shows the queue's leases in flight and executions waiting."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from click.testing import CliRunner

from loom.cli import main
from loom.store import SqliteEventStore
from loom.store.leases import LeaseRequest

APP = "tests.flowcontrol.queue_app:app"


def invoke(tmp_path: Path, *args: str) -> tuple[int, str]:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path}/loom.db"]
    result = CliRunner().invoke(main, [*base, *args])
    return result.exit_code, result.output


async def _fill(path: Path, queue: str, n: int) -> None:
    """Hold ``n`` leases on ``queue`` as other workers would."""
    store = SqliteEventStore(path)
    for i in range(n):
        request = LeaseRequest(queue, f"elsewhere-{i}", time.time(), 60.0, limit=2, owner="them")
        assert await store.leases().acquire(request)
    await store.aclose()


def test_a_start_on_a_full_queue_waits_and_is_listed(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "start", "work", "--input", "{}", "--queue", "two", "--id", "a")
    assert code == 0 and "completed" in out
    asyncio.run(_fill(tmp_path / "loom.db", "two", 2))
    code, out = invoke(tmp_path, "start", "work", "--input", "{}", "--queue", "two", "--id", "b")
    assert code == 0 and "running" in out  # admitted nowhere: nothing ran
    code, out = invoke(tmp_path, "queues", "--json")
    listed = {q["name"]: q for q in json.loads(out)["queues"]}
    assert (listed["two"]["in_flight"], listed["two"]["waiting"]) == (2, 1)
    assert listed["two"]["concurrency"] == 2
    code, out = invoke(tmp_path, "queues")
    assert "two  concurrency 2  rate/s -  in flight 2  waiting 1" in out


def test_bad_queue_options_are_usage_errors(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "start", "work", "--input", "{}", "--queue", "nope")
    assert code == 2 and "unknown queue 'nope'" in out
    code, out = invoke(tmp_path, "start", "work", "--input", "{}", "--partition-key", "k")
    assert code == 2 and "a partition key needs a queue" in out
