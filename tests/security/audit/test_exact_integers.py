"""Integers JSON can carry and the log cannot: beyond the 64-bit range.

Python parses ``100000000000000000000000000000`` as an int, and the engine recorded it; then
the snapshot codec (orjson) refused to write it, so the start answered 500 after its input
and its effect's output were in the log, and every later read of the execution (``GET``,
``loom show``, a resume) answered 500 too: an execution nobody could look at or finish.
Promise now: such an integer anywhere in a recorded value is refused where it enters, with
``integer_out_of_range`` naming where it is, and nothing is written; an effect or flow
that produces one fails with ``invalid_output`` and stays readable; an integer at the edge
of the range round-trips exactly.
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
from loom.payloads import dump_exact
from loom.runtime import Runtime
from tests.functions.apps import calls
from tests.functions.conftest import APP_REF, BEARER, REPO
from tests.functions.helpers import history
from tests.security.audit.helpers import JSON, refused

HUGE = 10**30
EDGE = 2**64 - 1


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (HUGE, "$"),
        (-(2**63) - 1, "$"),
        ({"n": 2**64}, "$.n"),
        ({"a": [1, {"b": [0, -(10**40)]}]}, "$.a[1].b[1]"),
    ],
)
def test_an_integer_beyond_64_bits_is_refused_naming_where(value: object, where: str) -> None:
    """Attack: a value holding an integer outside -2**63..2**64-1. Promise: the JSON
    boundary refuses it with ``integer_out_of_range`` and the path of the integer."""
    with pytest.raises(InvalidPayloadError) as caught:
        dump_exact(value, "the input")
    assert caught.value.code == "integer_out_of_range"
    assert caught.value.details == {"path": where}
    assert where in caught.value.message


def test_digits_in_strings_and_integers_at_the_edge_pass() -> None:
    """A long run of digits inside a string is no integer, and the edges of the range fit."""
    for value in ("1" * 40, {"id": "9" * 30, "n": EDGE}, [-(2**63), EDGE, 2**63], True):
        assert json.loads(dump_exact(value)) == value


def test_a_start_with_a_huge_integer_is_a_400_and_writes_nothing(
    client: FlaskClient, side_dir: Path
) -> None:
    """Attack: ``POST /executions`` whose input holds 10**30. Promise: 400
    ``integer_out_of_range`` naming ``$.n``, no execution, no effect invoked."""
    body = json.dumps({"flow": "echo", "input": {"n": HUGE}, "execution_id": "big-1"})
    answer = refused(client.post("/executions", data=body, headers=JSON), 400)
    assert answer["code"] == "integer_out_of_range" and answer["details"] == {"path": "$.n"}
    refused(client.get("/executions/big-1"), 404, "unknown_execution")
    assert calls(side_dir) == []


def test_a_resume_or_message_with_a_huge_integer_appends_nothing(
    client: FlaskClient, runtime: Runtime
) -> None:
    """Attack: a resume payload and a message payload holding 2**64 + 1. Promise: 400, the log
    unchanged, the execution still waiting and readable."""
    client.post("/executions", json={"flow": "gated", "input": {"n": 1}, "execution_id": "g-1"})
    before = history(runtime, "g-1")
    resume = json.dumps({"on": "go", "correlation_key": "g-1:go", "payload": {"n": 2**64 + 1}})
    refused(client.post("/executions/g-1/resume", data=resume, headers={**JSON, **BEARER}), 400)
    message = json.dumps({"topic": "t", "payload": [2**64 + 1]})
    refused(client.post("/executions/g-1/messages", data=message, headers={**JSON, **BEARER}), 400)
    assert history(runtime, "g-1") == before
    view = client.get("/executions/g-1")
    assert view.status_code == 200 and view.json is not None
    assert view.json["execution"]["status"] == "suspended"


def test_an_effect_output_beyond_64_bits_fails_the_step_and_stays_readable(
    client: FlaskClient,
) -> None:
    """Attack: an input that fits, whose effect output (twice it) does not. Promise: the
    step fails with ``invalid_output`` (the effect ran; it is not retried), the execution
    ends ``failed`` and ``GET`` reads it; an input at the edge of the range is exact."""
    started = client.post(
        "/executions", json={"flow": "echo", "input": {"n": 2**63}, "execution_id": "e-1"}
    )
    assert started.status_code == 200, started.data
    assert started.json is not None and started.json["status"] == "failed"
    view = client.get("/executions/e-1")
    assert view.status_code == 200 and view.json is not None
    failed = [e for e in view.json["history"] if e["type"] == "EffectFailed"]
    assert [e["error"]["code"] for e in failed] == ["invalid_output"]
    edge = client.post(
        "/executions",
        json={"flow": "gated", "input": {"n": EDGE, "x": EDGE}, "execution_id": "e-2"},
    )
    assert edge.status_code == 200, edge.data
    read = client.get("/executions/e-2")
    assert read.json is not None and read.json["history"][0]["input"] == {"n": EDGE, "x": EDGE}


def test_the_cli_refuses_a_huge_integer_and_writes_nothing(
    runtime: Runtime, worker_env: dict[str, str]
) -> None:
    """Attack: ``loom start echo --input '{"n": 1e30 as an integer}'``. Promise: exit 2 with
    the message naming the integer's path, no traceback, nothing stored."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "loom", "--app", APP_REF, "--store", worker_env["LOOM_STORE"]]
    done = subprocess.run(
        [*argv, "start", "echo", "--input", json.dumps({"n": HUGE}), "--id", "cli-1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "$.n" in done.stderr and "64-bit" in done.stderr
    assert "Traceback" not in done.stderr
    refused_read = subprocess.run(
        [*argv, "show", "cli-1"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert "unknown execution" in refused_read.stderr


def nested(depth: int) -> object:
    return json.loads("[" * depth + "]" * depth)


@pytest.mark.parametrize("depth", [129, 250, 300, 900])
def test_a_value_nested_too_deep_is_a_400_and_writes_nothing(
    client: FlaskClient, side_dir: Path, depth: int
) -> None:
    """Attack: a start input nesting arrays 129 to 900 levels deep (well inside what the
    body parser takes). Before, 250 levels were recorded and then no read of the log could
    parse them back (every GET a 500), and 300 was a 500 from the serializer. Promise: 400
    ``too_deep``, no execution, no effect invoked."""
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
    edge = {"on": "go", "correlation_key": "g-2:go", "payload": nested(128)}
    ok = client.post("/executions/g-2/resume", data=json.dumps(edge), headers=headers)
    assert ok.status_code == 200, ok.data
    view = client.get("/executions/g-2")
    assert view.status_code == 200 and view.json is not None
    resumed = [e for e in view.json["history"] if e["type"] == "ExecutionResumed"]
    assert resumed[0]["payload"] == nested(128)
