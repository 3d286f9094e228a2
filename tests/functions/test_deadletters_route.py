"""``GET /dead-letters`` and ``POST /dead-letters/retry`` through the worker target.

Failed executions come from real runs of an effect with a bug; the re-drive is authorized
like a retry (action ``retry``, no execution id), its dry run writes nothing, and a second
re-drive starts nothing new.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import cast

import functions_framework
import pytest
from flask import Flask
from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.auth import sign
from loom.workers.server import build_runtime
from tests.flowcontrol.apps import CALLS
from tests.functions.conftest import BEARER, MAIN, SECRET
from tests.functions.helpers import assert_error

APP = "tests.flowcontrol.apps:app"
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def pipeline(
    worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FlaskClient, Runtime]]:
    """The worker target and a runtime over its store, both on the flow-control app."""
    monkeypatch.setenv("LOOM_APP", APP)
    client = cast(Flask, functions_framework.create_app("worker", str(MAIN))).test_client()
    runtime = build_runtime(APP, worker_env["LOOM_STORE"])
    CALLS.bug = True
    for eid in ("f-1", "f-2"):
        asyncio.run(runtime.start("pipeline", 2, execution_id=eid))
    CALLS.bug = False
    yield client, runtime
    asyncio.run(runtime.store.aclose())


def test_list_then_redrive_with_auth_and_a_dry_run(
    pipeline: tuple[FlaskClient, Runtime],
) -> None:
    client, runtime = pipeline
    listed = client.get("/dead-letters?status=failed&flow=pipeline")
    assert listed.status_code == 200 and listed.json is not None
    assert [r["execution_id"] for r in listed.json["dead_letters"]] == ["f-1", "f-2"]
    body = json.dumps({"status": "failed", "dry_run": True}).encode()
    assert_error(client.post("/dead-letters/retry", data=body, headers=JSON), 401)
    forged = {**JSON, "X-Loom-Signature": sign(SECRET, "fork", "", body)}
    assert_error(client.post("/dead-letters/retry", data=body, headers=forged), 403)
    signed = {**JSON, "X-Loom-Signature": sign(SECRET, "retry", "", body)}
    planned = client.post("/dead-letters/retry", data=body, headers=signed)
    assert planned.status_code == 200 and planned.json is not None
    assert [r["action"] for r in planned.json["redriven"]] == ["fork", "fork"]
    assert len(asyncio.run(runtime.list())) == 2  # nothing was started
    real = json.dumps({"status": "failed", "by": "bob"}).encode()
    done = client.post("/dead-letters/retry", data=real, headers={**JSON, **BEARER})
    assert done.json is not None
    assert [(r["action"], r["status"]) for r in done.json["redriven"]] == [
        ("fork", "suspended"),
        ("fork", "suspended"),
    ]
    again = client.post("/dead-letters/retry", data=real, headers={**JSON, **BEARER})
    assert again.json is not None and {r["action"] for r in again.json["redriven"]} == {"none"}
    assert len(asyncio.run(runtime.list())) == 4


def test_bad_queries_are_refused(pipeline: tuple[FlaskClient, Runtime]) -> None:
    client, _ = pipeline
    assert_error(client.get("/dead-letters"), 400, "invalid_request")
    assert_error(client.get("/dead-letters?status=failed&limit=0"), 400, "invalid_request")
    assert_error(client.get("/dead-letters?status=failed&since=soon"), 400)
    body = json.dumps({"status": "lost"}).encode()
    assert_error(client.post("/dead-letters/retry", data=body, headers={**JSON, **BEARER}), 400)


def test_a_second_redrive_of_failed_redrives_starts_nothing_new(
    pipeline: tuple[FlaskClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, runtime = pipeline
    monkeypatch.setattr(CALLS, "bug", True)  # every re-drive fails again
    real = json.dumps({"status": "failed", "by": "bob"}).encode()
    done = client.post("/dead-letters/retry", data=real, headers={**JSON, **BEARER})
    assert done.json is not None
    assert [(r["action"], r["status"]) for r in done.json["redriven"]] == [("fork", "failed")] * 2
    for _ in range(2):
        again = client.post("/dead-letters/retry", data=real, headers={**JSON, **BEARER})
        assert again.json is not None
        assert [(r["execution_id"], r["action"]) for r in again.json["redriven"]] == [
            ("f-1", "none"),
            ("f-2", "none"),
        ]
        assert len(asyncio.run(runtime.list())) == 4
    listed = client.get("/dead-letters?status=failed")  # the listing still shows all four
    assert listed.json is not None and len(listed.json["dead_letters"]) == 4
    monkeypatch.setattr(CALLS, "bug", False)
    named = json.dumps({"status": "failed", "execution_ids": ["f-1.redrive-5"]}).encode()
    one = client.post("/dead-letters/retry", data=named, headers={**JSON, **BEARER})
    assert one.json is not None, one.data
    assert [(r["execution_id"], r["action"], r["status"]) for r in one.json["redriven"]] == [
        ("f-1.redrive-5", "fork", "suspended")  # named, a failed re-drive is re-driven
    ]
