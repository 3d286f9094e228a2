"""The caller check, scoped per execution on the routes that name their execution in the
body: ``POST /execute``, ``POST /executions`` and ``POST /dead-letters/retry``.

The contract (``loom.workers.auth.AuthRequest``): the worker parses such a body first
(size-bounded; malformed is 400 with the check never asked and nothing done), then asks the
check about the execution the body names, with its flow; a refused caller gets 401/403 with
an answer that does not depend on whether the execution exists. The check used here allows
each caller its own executions (``tests.security.scoped_callers``); the worker is the
``worker`` target as functions-framework builds it, over a per-test SQLite file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import functions_framework
import pytest
from flask import Flask
from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.auth import sign
from loom.workers.server import build_runtime
from tests.flowcontrol.apps import CALLS
from tests.functions.conftest import MAIN, SECRET
from tests.functions.helpers import history, seed
from tests.security.audit.helpers import refused
from tests.security.scoped_callers import SEEN

JSON = {"Content-Type": "application/json"}
Client = Callable[[str], FlaskClient]


@pytest.fixture
def worker(worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Client:
    """The worker target with ``LOOM_CALLER_AUTH`` set to the named check."""

    def build(check: str) -> FlaskClient:
        monkeypatch.setenv("LOOM_CALLER_AUTH", f"tests.security.scoped_callers:{check}")
        SEEN.clear()
        return cast(Flask, functions_framework.create_app("worker", str(MAIN))).test_client()

    return build


def as_(who: str | None) -> dict[str, str]:
    return {**JSON, "X-Caller": who} if who else dict(JSON)


def asked() -> list[tuple[str, str, str | None]]:
    return [(r.action, r.execution_id, r.flow) for r in SEEN]


def exists(runtime: Runtime, eid: str) -> bool:
    return any(s.execution_id == eid for s in asyncio.run(runtime.list(limit=1000)))


def test_a_start_is_checked_on_the_execution_and_flow_it_asks_for(
    worker: Client, runtime: Runtime
) -> None:
    client = worker("per_execution")
    body = {"flow": "echo", "input": {"n": 1}, "execution_id": "alice-1"}
    ok = client.post("/executions", json=body, headers=as_("alice"))
    assert ok.status_code == 200 and ok.json is not None, ok.data
    assert ok.json["status"] == "completed"
    assert asked() == [("start", "alice-1", "echo")]
    assert json.loads(SEEN[0].body) == body  # the check sees the body it scopes
    theirs = {**body, "execution_id": "bob-1"}
    denied = refused(client.post("/executions", json=theirs, headers=as_("alice")), 403)
    assert denied["code"] == "forbidden"
    refused(client.post("/executions", json=theirs, headers=as_(None)), 401, "unauthenticated")
    # A start that names no execution is asked about as "" (this policy refuses it).
    anonymous = {"flow": "echo", "input": {"n": 1}}
    refused(client.post("/executions", json=anonymous, headers=as_("alice")), 403)
    assert client.post("/executions", json=anonymous, headers=as_("ops")).status_code == 200
    assert not exists(runtime, "bob-1")
    assert history(runtime, "alice-1")[0].by == "alice"  # type: ignore[attr-defined]


def test_execute_is_checked_on_the_package_execution_and_leaks_nothing(
    worker: Client, runtime: Runtime
) -> None:
    client = worker("per_execution")
    seed(runtime, "echo", {"n": 2}, "alice-2")
    seed(runtime, "echo", {"n": 3}, "bob-2")
    bob_before = history(runtime, "bob-2")

    def execute(eid: str, who: str | None) -> Any:
        package = {"execution_id": eid, "flow": "echo", "reason": "start"}
        return client.post("/execute", json={"executionPackage": package}, headers=as_(who))

    ran = execute("alice-2", "alice")
    assert ran.status_code == 200 and ran.json is not None, ran.data
    assert ran.json["status"] == "completed"
    assert asked() == [("execute", "alice-2", "echo")]
    existing = refused(execute("bob-2", "alice"), 403, "forbidden")
    missing = refused(execute("bob-404", "alice"), 403, "forbidden")
    assert existing == missing  # the answer does not tell whether bob's execution exists
    assert refused(execute("bob-2", None), 401) == refused(execute("bob-404", None), 401)
    assert history(runtime, "bob-2") == bob_before
    assert not exists(runtime, "bob-404")


@pytest.mark.parametrize(
    ("path", "data", "headers", "status"),
    [
        ("/executions", b"{not json", JSON, 400),
        ("/executions", b'{"flow": ""}', JSON, 400),
        ("/executions", b'{"flow": "echo", "execution_id": "a/b"}', JSON, 400),
        ("/executions", b'{"flow": "echo"}', {"Content-Type": "text/plain"}, 415),
        ("/execute", b'{"executionPackage": {}}', JSON, 400),
        ("/execute", b'{"executionPackage": {"execution_id": "x", "extra": 1}}', JSON, 400),
        ("/execute", b"[]", JSON, 400),
        ("/dead-letters/retry", b'{"status": "lost"}', JSON, 400),
    ],
)
def test_a_malformed_body_is_a_400_before_the_check_and_does_nothing(
    worker: Client,
    runtime: Runtime,
    path: str,
    data: bytes,
    headers: dict[str, str],
    status: int,
) -> None:
    client = worker("per_execution")
    signed = {**headers, "X-Loom-Signature": sign(SECRET, "retry", "", data)}
    for who in (None, "alice", "ops"):
        response = client.post(path, data=data, headers={**signed, **as_(who), **headers})
        refused(response, status)
    assert asked() == []
    assert asyncio.run(runtime.list(limit=10)) == []


def test_an_oversized_body_is_refused_before_the_check(
    worker: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_MAX_BODY_BYTES", "1000")
    client = worker("per_execution")
    body = {"flow": "echo", "input": "x" * 2000, "execution_id": "alice-9"}
    refused(client.post("/executions", json=body, headers=as_("alice")), 413, "too_large")
    assert asked() == []


@pytest.fixture
def dead_letters(worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """Two failed ``pipeline`` executions, alice's (older) and bob's, on the worker's store."""
    app = "tests.flowcontrol.apps:app"
    monkeypatch.setenv("LOOM_APP", app)
    runtime = build_runtime(app, worker_env["LOOM_STORE"])
    CALLS.bug = True
    for eid in ("alice-f", "bob-f"):
        asyncio.run(runtime.start("pipeline", 2, execution_id=eid))
    CALLS.bug = False
    yield runtime
    asyncio.run(runtime.store.aclose())


def test_a_dead_letter_retry_is_checked_on_each_execution_it_selects(
    worker: Client, dead_letters: Runtime
) -> None:
    client = worker("per_execution")

    def redrive(who: str | None, **body: Any) -> Any:
        raw = json.dumps({"status": "failed", **body}).encode()
        headers = {**as_(who), "X-Loom-Signature": sign(SECRET, "retry", "", raw)}
        return client.post("/dead-letters/retry", data=raw, headers=headers)

    denied = refused(redrive("alice"), 403, "forbidden")  # bob's is among those selected
    assert asked() == [("retry", "alice-f", "pipeline"), ("retry", "bob-f", "pipeline")]
    assert "bob-f" not in json.dumps(denied)
    assert len(asyncio.run(dead_letters.list())) == 2  # all or nothing: no fork was made
    refused(redrive(None), 401, "unauthenticated")
    refused(redrive(None, flow="nothing-matches"), 401, "unauthenticated")
    mine = redrive("alice", limit=1)  # the oldest only: alice's
    assert mine.status_code == 200 and mine.json is not None, mine.data
    assert [(r["execution_id"], r["action"]) for r in mine.json["redriven"]] == [
        ("alice-f", "fork")
    ]
    assert len(asyncio.run(dead_letters.list())) == 3
    every = redrive("ops", by="carol")
    assert every.status_code == 200 and every.json is not None, every.data
    assert [r["action"] for r in every.json["redriven"]] == ["none", "fork"]
    fork = every.json["redriven"][1]["new_execution_id"]
    assert history(dead_letters, fork)[0].by == "carol (via ops)"  # type: ignore[attr-defined]


def test_a_dead_letter_retry_naming_executions_is_checked_on_each_before_any_read(
    worker: Client, dead_letters: Runtime
) -> None:
    """A caller scoped to its own executions names them: checked on each named id before
    anything is read, so naming another's (existing or not) is the same 403."""
    client = worker("per_execution")

    def redrive(who: str, ids: list[str], **body: Any) -> Any:
        raw = json.dumps({"status": "failed", "execution_ids": ids, **body}).encode()
        headers = {**as_(who), "X-Loom-Signature": sign(SECRET, "retry", "", raw)}
        return client.post("/dead-letters/retry", data=raw, headers=headers)

    existing = refused(redrive("alice", ["alice-f", "bob-f"]), 403, "forbidden")
    assert refused(redrive("alice", ["alice-f", "bob-404"]), 403) == existing
    assert len(asyncio.run(dead_letters.list())) == 2
    assert [eid for _, eid, _ in asked()] == ["alice-f", "bob-f", "alice-f", "bob-404"]
    planned = redrive("alice", ["alice-f", "alice-f", "alice-404"], dry_run=True)
    assert planned.status_code == 200 and planned.json is not None, planned.data
    assert [r["execution_id"] for r in planned.json["redriven"]] == ["alice-f"]
    done = redrive("alice", ["alice-f"])
    assert done.status_code == 200 and done.json is not None, done.data
    assert [(r["execution_id"], r["action"]) for r in done.json["redriven"]] == [
        ("alice-f", "fork")
    ]
    assert len(asyncio.run(dead_letters.list())) == 3  # bob's letter was not touched
    other_flow = redrive("ops", ["bob-f"], flow="another")
    assert other_flow.json is not None and other_flow.json["redriven"] == []
    refused(redrive("ops", []), 400)


def test_a_check_written_for_four_fields_keeps_working(
    worker: Client, runtime: Runtime, dead_letters: Runtime
) -> None:
    client = worker("positional")
    start = {"flow": "pipeline", "input": 1, "execution_id": "p-1"}
    assert client.post("/executions", json=start, headers=as_("ops")).status_code == 200
    refused(client.post("/executions", json=start, headers=as_("alice")), 403)
    package = {"executionPackage": {"execution_id": "p-1"}}
    assert client.post("/execute", json=package, headers=as_("ops")).status_code == 200
    raw = b'{"status": "failed", "dry_run": true}'
    headers = {**as_("ops"), "X-Loom-Signature": sign(SECRET, "retry", "", raw)}
    planned = client.post("/dead-letters/retry", data=raw, headers=headers)
    assert planned.status_code == 200, planned.data
    assert [(a, e) for a, e, _ in asked()][-2:] == [("retry", "alice-f"), ("retry", "bob-f")]
    assert client.get("/executions/p-1", headers=as_("ops")).status_code == 200


def test_routes_naming_the_execution_in_the_path_are_still_checked_first(
    worker: Client, runtime: Runtime
) -> None:
    """Only the three body-scoped routes defer the check; every other one is checked on
    its path's execution before its body is even read (a malformed body is still 403)."""
    client = worker("per_execution")
    seed(runtime, "gated", {"n": 1}, "bob-3")
    before = history(runtime, "bob-3")
    for path in ("resume", "verdict", "cancel", "retry", "fork", "messages"):
        response = client.post(f"/executions/bob-3/{path}", data=b"{not json", headers=as_("alice"))
        refused(response, 403, "forbidden")
    refused(client.get("/executions/bob-3", headers=as_("alice")), 403, "forbidden")
    assert {eid for _, eid, _ in asked()} == {"bob-3"}
    assert history(runtime, "bob-3") == before
