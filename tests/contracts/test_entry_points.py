"""The id corpus, reference forgeries and non-finite numbers at every entry point.

Entry points: the Python API, the ``worker``, ``tasks`` and ``events`` functions-framework
targets (built as functions-framework serves them), the CLI and Commission case ids. An id
that breaks the rule is refused naming the rule (400, CLI exit 2, a rejected and
acknowledged Pub/Sub message) and nothing is written; a valid id comes back byte for byte.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import functions_framework
import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient

from loom.cli import main as cli
from loom.commission.store import CaseStore
from loom.errors import InvalidExecutionIdError
from loom.reserved_ids import reserved_form
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.workers.server import build_runtime
from tests.contracts.id_corpus import INVALID, VALID

REPO = Path(__file__).resolve().parents[2]
MAIN = str(REPO / "functions" / "main.py")
APP = "tests.functions.apps:app"
BEARER = {"Authorization": "Bearer entry-secret-0123456789"}
# What a URL path, a command line or JSON can carry at all.
PATH_INVALID = [i for i in INVALID if i and "\ud800" not in i and "\n" not in i and "\r" not in i]
ARGV_INVALID = [i for i in INVALID if "\x00" not in i and "\ud800" not in i]
# Valid ids an outside start may take: the engine's own forms are reserved (loom.reserved_ids).
OUTSIDE_VALID = [i for i in VALID if reserved_form(i) is None]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A worker environment on a fresh SQLite file; yields the store URL."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    for key, value in {
        "LOOM_APP": APP,
        "LOOM_STORE": url,
        "LOOM_RESUME_SECRET": "entry-secret-0123456789",
        "LOOM_VERDICT_SECRET": "entry-secret-0123456789",
        "LOOM_DISPATCH": "inline://",
        "LOOM_TEST_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("LOOM_BLOBS", "LOOM_MAX_BODY_BYTES", "LOOM_RESUME_AUTH", "LOOM_VERDICT_AUTH"):
        monkeypatch.delenv(key, raising=False)
    yield url


def target(name: str) -> FlaskClient:
    return functions_framework.create_app(name, MAIN).test_client()


def written(url: str) -> list[str]:
    """The execution ids in the store."""

    async def ids() -> list[str]:
        store = SqliteEventStore(url.removeprefix("sqlite:///"))
        try:
            return [row.execution_id for row in await store.list()]
        finally:
            await store.aclose()

    return asyncio.run(ids())


def refused(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, (response.status_code, response.data)
    body = json.loads(response.data)
    assert body["code"] in ("invalid_execution_id", "malformed_json"), body
    if body["code"] == "invalid_execution_id":
        assert "the rule" in body["message"], body
    return body


@pytest.mark.parametrize("eid", INVALID, ids=range(len(INVALID)))
def test_the_worker_refuses_an_invalid_id_in_a_body(env: str, eid: str) -> None:
    worker = target("worker")
    refused(worker.post("/executions", json={"flow": "echo", "input": {}, "execution_id": eid}))
    package = {"execution_id": eid, "flow": "echo", "reason": "start"}
    refused(worker.post("/execute", json={"executionPackage": package}))
    assert written(env) == []


@pytest.mark.parametrize("eid", PATH_INVALID, ids=range(len(PATH_INVALID)))
def test_the_worker_refuses_an_invalid_id_in_a_path(env: str, eid: str) -> None:
    worker = target("worker")
    path = f"/executions/{quote(eid, safe='')}"
    refused(worker.get(path))
    refused(worker.post(f"{path}/resume", json={"on": "go", "correlation_key": "k"}))
    verdict = {"step_id": "1", "verdict": "not_performed"}
    refused(worker.post(f"{path}/verdict", json=verdict, headers=BEARER))
    assert written(env) == []


@pytest.mark.parametrize("eid", OUTSIDE_VALID, ids=range(len(OUTSIDE_VALID)))
def test_the_worker_returns_a_valid_id_byte_for_byte(env: str, eid: str) -> None:
    worker = target("worker")
    started = worker.post("/executions", json={"flow": "echo", "input": {}, "execution_id": eid})
    assert started.status_code == 200, started.data
    got = worker.get(f"/executions/{quote(eid, safe='')}?history=false")
    assert got.status_code == 200, got.data
    assert json.loads(got.data)["execution"]["execution_id"].encode() == eid.encode()
    assert written(env) == [eid]


@pytest.mark.parametrize("eid", INVALID, ids=range(len(INVALID)))
def test_the_tasks_target_refuses_an_invalid_id(env: str, eid: str) -> None:
    package = {"execution_id": eid, "flow": "echo", "reason": "start"}
    refused(target("tasks").post("/tasks/execute", json={"executionPackage": package}))
    assert written(env) == []


def pubsub(message: dict[str, Any], message_id: str) -> dict[str, Any]:
    data = base64.b64encode(json.dumps(message).encode()).decode()
    return {"message": {"data": data, "messageId": message_id}, "subscription": "s"}


@pytest.mark.parametrize("eid", INVALID, ids=range(len(INVALID)))
def test_the_events_target_acknowledges_and_rejects_an_invalid_id(env: str, eid: str) -> None:
    events = target("events")
    start = {"action": "start", "flow": "echo", "input": {}, "execution_id": eid}
    resume = {"action": "resume", "execution_id": eid, "on": "go", "correlation_key": "k"}
    for n, message in enumerate((start, resume)):
        # 2xx: a redelivery could never succeed. Nothing is written.
        response = events.post("/", json=pubsub(message, f"m-{n}"))
        assert response.status_code == 200, response.data
    assert written(env) == []


def test_the_events_target_refuses_a_message_id_that_makes_an_invalid_id(env: str) -> None:
    start = {"action": "start", "flow": "echo", "input": {}}
    response = target("events").post("/", json=pubsub(start, "a/b"))
    assert response.status_code == 200, response.data
    assert written(env) == []


@pytest.mark.parametrize("eid", ARGV_INVALID, ids=range(len(ARGV_INVALID)))
def test_the_cli_exits_2_naming_the_rule(tmp_path: Path, eid: str) -> None:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path / 'cli.db'}"]
    runner = CliRunner()
    for args in (
        ["start", "echo", "--input", "{}", "--id", eid],
        ["show", eid],
        ["execute", eid],
        ["resume", eid, "--on", "go", "--key", "k"],
        ["verdict", eid, "1", "not_performed"],
        ["cancel", eid],
    ):
        result = runner.invoke(cli, [*base, *args])
        assert result.exit_code == 2, (args, result.output)
        assert "the rule" in result.output, result.output
    assert not (tmp_path / "cli.db").exists()


def test_the_cli_refuses_non_finite_input_with_exit_2(tmp_path: Path) -> None:
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path / 'cli.db'}"]
    for raw in ('{"n": 1e400}', '{"n": NaN}', '{"n": -Infinity}'):
        result = CliRunner().invoke(cli, [*base, "start", "echo", "--input", raw, "--id", "c"])
        assert result.exit_code == 2, result.output
        assert "non-finite" in result.output
    assert written(f"sqlite:///{tmp_path / 'cli.db'}") == []


@pytest.mark.parametrize("eid", INVALID, ids=range(len(INVALID)))
async def test_the_python_api_refuses_an_invalid_id(tmp_path: Path, eid: str) -> None:
    rt: Runtime = build_runtime(APP, f"sqlite:///{tmp_path / 'api.db'}")
    try:
        for call in (
            lambda: rt.start("echo", {}, execution_id=eid),
            lambda: rt.resume(eid, "go", "k", None),
            lambda: rt.verdict(eid, "1", "not_performed"),
            lambda: rt.cancel(eid),
            lambda: rt.result(eid),
        ):
            with pytest.raises(InvalidExecutionIdError, match="the rule"):
                await call()
        assert await rt.store.list() == []
    finally:
        await rt.store.aclose()


@pytest.mark.parametrize("case_id", [*INVALID, "x" * 201], ids=range(len(INVALID) + 1))
async def test_commission_case_ids_follow_the_rule(tmp_path: Path, case_id: str) -> None:
    store = SqliteEventStore(tmp_path / "cases.db")
    try:
        with pytest.raises(InvalidExecutionIdError, match="case id"):
            await CaseStore(store).load(case_id)
        assert await store.list() == []
    finally:
        await store.aclose()


def test_the_worker_refuses_1e400_and_serves_forged_refs_as_data(env: str) -> None:
    worker = target("worker")
    huge = b'{"flow": "echo", "input": {"n": 1e400}, "execution_id": "big"}'
    body = json.loads(worker.post("/executions", data=huge, content_type="application/json").data)
    assert body["code"] == "non_finite_number" and body["details"]["path"] == "$.n"
    assert written(env) == []
    for n, value in enumerate(({"$blob": "file:../loom.db"}, {"$loom.value": {"n": 1}})):
        start = {"flow": "echo", "input": value, "execution_id": f"forger-{n}"}
        answer = worker.post("/executions", json=start)
        assert answer.status_code == 200, answer.data
        result = json.loads(answer.data)
        assert result["status"] == "completed" and result["output"]["echo"] == value
        got = json.loads(worker.get(f"/executions/forger-{n}").data)
        assert got["execution"]["output"]["echo"] == value


def test_the_events_target_rejects_a_non_finite_input(env: str) -> None:
    raw = b'{"action": "start", "flow": "echo", "input": {"n": 1e400}, "execution_id": "ps"}'
    push = {
        "message": {"data": base64.b64encode(raw).decode(), "messageId": "9"},
        "subscription": "s",
    }
    response = target("events").post("/", json=push)
    assert response.status_code == 200, response.data  # acknowledged: it can never succeed
    assert written(env) == []


def test_the_worker_refuses_a_non_finite_resume_payload_and_verdict_output(env: str) -> None:
    worker = target("worker")
    start = {"flow": "gated", "input": {"n": 1}, "execution_id": "g"}
    assert worker.post("/executions", json=start).status_code == 200
    before = json.loads(worker.get("/executions/g").data)["history"]
    resume = b'{"on": "go", "correlation_key": "g:go", "payload": {"name": -1e400}}'
    answer = worker.post(
        "/executions/g/resume", data=resume, content_type="application/json", headers=BEARER
    )
    assert answer.status_code == 400 and json.loads(answer.data)["code"] == "non_finite_number"
    verdict = b'{"step_id": "1", "verdict": "performed", "output": 1e999}'
    answer = worker.post(
        "/executions/g/verdict", data=verdict, content_type="application/json", headers=BEARER
    )
    assert answer.status_code == 400, answer.data
    assert json.loads(worker.get("/executions/g").data)["history"] == before


@pytest.mark.parametrize("eid", ["fam.child.1", "fam#run2.child.2.1"])
def test_an_outside_start_of_a_child_flows_id_is_refused(env: str, tmp_path: Path, eid: str):
    """The child form (``{parent}.child.{step}``) is the engine's: 400 / exit 2, nothing
    written, whatever the entry point."""
    body = {"flow": "echo", "input": {}, "execution_id": eid}
    response = target("worker").post("/executions", json=body)
    assert response.status_code == 400, response.data
    assert json.loads(response.data)["code"] == "reserved_execution_id"
    start = {"action": "start", "flow": "echo", "input": {}, "execution_id": eid}
    assert target("events").post("/", json=pubsub(start, "m-1")).status_code == 200
    assert written(env) == []
    base = ["--app", APP, "--store", f"sqlite:///{tmp_path / 'cli.db'}"]
    args = [*base, "start", "echo", "--input", "{}", "--id", eid]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "child flows" in result.output
