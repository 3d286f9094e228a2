"""Values at the edges of what the log can hold: integers beyond 64 bits, and arrays and
objects nested deep.

Integers of any size are exact (the events keep them, and the snapshot codec falls back to
an exact one where orjson cannot): here they go through the HTTP worker and the CLI and come
back as sent. Nesting is bounded: the event parser refuses JSON more than 200 levels deep,
so a value 250 levels deep used to be recorded and then no read of the log could parse it
(every ``GET`` a 500), and one 300 levels deep made the serializer raise a bare
``ValueError`` (a 500). Promise now: more than 128 levels is refused where it enters with
``too_deep`` and nothing is written; 128 levels round-trip.

The worker is the ``worker`` target as functions-framework builds it, over a per-test
SQLite file; the CLI runs as ``python -m loom`` on the same file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from loom.errors import InvalidPayloadError
from loom.kernel.payloads import MAX_DEPTH, dump_exact
from loom.runtime import Runtime
from tests.functions.apps import calls
from tests.functions.conftest import APP_REF, BEARER, REPO
from tests.functions.helpers import history
from tests.security.audit.helpers import JSON, refused

HUGE = 10**30


def test_integers_beyond_64_bits_round_trip_over_http(client: FlaskClient) -> None:
    """Attack: a start input and a resume payload holding integers orjson cannot write
    (10**30, -(2**70)). Before, the start answered 500 after writing the execution and every
    read of it failed. Promise: 200, and ``GET`` (events and folded state) gives them back
    exactly."""
    started = client.post(
        "/executions", json={"flow": "gated", "input": {"n": 2, "big": HUGE}, "execution_id": "b-1"}
    )
    assert started.status_code == 200, started.data
    body = json.dumps({"on": "go", "correlation_key": "b-1:go", "payload": {"name": -(2**70)}})
    resumed = client.post("/executions/b-1/resume", data=body, headers={**JSON, **BEARER})
    assert resumed.status_code == 200, resumed.data
    view = client.get("/executions/b-1")
    assert view.status_code == 200 and view.json is not None
    assert view.json["history"][0]["input"] == {"n": 2, "big": HUGE}
    assert view.json["execution"]["output"]["greeting"] == f"hello {-(2**70)}"


def test_the_cli_starts_and_shows_an_integer_beyond_64_bits(worker_env: dict[str, str]) -> None:
    """Attack: ``loom start echo --input '{"n": 10**30}'`` then ``loom show``. Promise: both
    succeed with no traceback, and the integer is shown exactly."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "loom", "--app", APP_REF, "--store", worker_env["LOOM_STORE"]]

    def loom(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv, *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    started = loom("start", "echo", "--input", json.dumps({"n": HUGE}), "--id", "cli-1")
    assert started.returncode == 0, started.stderr
    shown = loom("show", "cli-1")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert str(HUGE) in shown.stdout


def nested(depth: int) -> object:
    return json.loads("[" * depth + "]" * depth)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (nested(MAX_DEPTH + 1), "$" + "[0]" * MAX_DEPTH),
        ({"a": {"b": nested(MAX_DEPTH - 1)}}, "$.a.b" + "[0]" * (MAX_DEPTH - 2)),
    ],
)
def test_a_value_nested_too_deep_is_refused_naming_where(value: object, where: str) -> None:
    """The JSON boundary names the path where the value goes past the limit."""
    with pytest.raises(InvalidPayloadError) as caught:
        dump_exact(value, "the input")
    assert caught.value.code == "too_deep"
    assert caught.value.details == {"path": where, "limit": MAX_DEPTH}


def test_many_brackets_that_do_not_nest_pass() -> None:
    """Many arrays side by side, or brackets inside strings, are no deep value."""
    wide = [[[]] for _ in range(500)]
    for value in (wide, {"text": "[" * 1000}, nested(MAX_DEPTH)):
        assert json.loads(dump_exact(value)) == value


@pytest.mark.parametrize("depth", [129, 250, 300, 900])
def test_a_start_nested_too_deep_is_a_400_and_writes_nothing(
    client: FlaskClient, side_dir: Path, depth: int
) -> None:
    """Attack: a start input nesting arrays 129 to 900 levels deep (well inside what the
    body parser takes). Promise: 400 ``too_deep``, no execution, no effect invoked."""
    body = {"flow": "echo", "input": {"n": 1, "deep": nested(depth)}, "execution_id": "deep-1"}
    refused(client.post("/executions", json=body), 400, "too_deep")
    refused(client.get("/executions/deep-1"), 404, "unknown_execution")
    assert calls(side_dir) == []


def test_a_resume_nested_too_deep_appends_nothing_and_128_levels_pass(
    client: FlaskClient, runtime: Runtime
) -> None:
    """Attack: resume payloads 300 and 129 levels deep. Promise: 400 ``too_deep``, the log
    unchanged; a payload of exactly 128 levels is recorded and read back as sent."""
    client.post("/executions", json={"flow": "gated", "input": {"n": 1}, "execution_id": "g-2"})
    before = history(runtime, "g-2")
    headers = {**JSON, **BEARER}
    for depth in (300, 129):
        body = json.dumps({"on": "go", "correlation_key": "g-2:go", "payload": nested(depth)})
        refused(client.post("/executions/g-2/resume", data=body, headers=headers), 400, "too_deep")
    assert history(runtime, "g-2") == before
    edge = {"on": "go", "correlation_key": "g-2:go", "payload": nested(MAX_DEPTH)}
    ok = client.post("/executions/g-2/resume", data=json.dumps(edge), headers=headers)
    assert ok.status_code == 200, ok.data
    view = client.get("/executions/g-2")
    assert view.status_code == 200 and view.json is not None
    resumed = [e for e in view.json["history"] if e["type"] == "ExecutionResumed"]
    assert resumed[0]["payload"] == nested(MAX_DEPTH)
