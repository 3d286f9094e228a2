"""Every route the worker mounts is in its OpenAPI document, and the operators' routes
(retry, dead letters, queues, schedules) answer what the document says; the rules a
generated client needs (the id rule, the timeout bounds, a partition key needs a queue)
are in it; any method a path does not take is a 405 naming the ones it does (``Allow``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator

from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.workers.http_routes import ROUTES
from loom.workers.openapi import document
from loom.workers.server import WorkerHandler, create_wsgi_app
from tests.flowcontrol import queue_app, schedule_app
from tests.functions.conftest import BEARER
from tests.functions.helpers import seed
from tests.functions.test_openapi import _check  # pyright: ignore[reportPrivateUsage]

OWN = [("GET", ("health",)), ("GET", ("live",)), ("GET", ("openapi.json",))]


def _template(path: str) -> tuple[str, ...]:
    """``/executions/{execution_id}/retry`` as a route pattern: ``("executions", "*", "retry")``."""
    return tuple("*" if p.startswith("{") else p for p in path.strip("/").split("/"))


def mounted() -> set[tuple[str, tuple[str, ...]]]:
    return {(method, pattern) for method, pattern, _ in ROUTES} | set(OWN)


def documented() -> set[tuple[str, tuple[str, ...]]]:
    return {
        (method.upper(), _template(path))
        for path, item in document()["paths"].items()
        for method in item
    }


def test_every_mounted_route_is_documented_and_nothing_else() -> None:
    assert mounted() - documented() == set(), "mounted but not in /openapi.json"
    assert documented() - mounted() == set(), "documented but not mounted"
    for method, pattern in [("GET", ("dead-letters",)), ("POST", ("dead-letters", "retry"))]:
        assert (method, pattern) in documented()
    assert ("POST", ("executions", "*", "retry")) in documented()


def test_the_check_would_catch_a_route_left_out() -> None:
    ROUTES.append(("GET", ("undocumented",), ROUTES[0][2]))
    try:
        assert ("GET", ("undocumented",)) in mounted() - documented()
    finally:
        ROUTES.pop()


def test_the_rules_a_generated_client_needs_are_in_the_document() -> None:
    doc = document()
    [execution_id] = [
        p for p in doc["paths"]["/executions/{execution_id}"]["get"]["parameters"]
        if p["name"] == "execution_id"
    ]  # fmt: skip
    assert execution_id["schema"]["maxLength"] == 255
    assert (
        "no '/'" in execution_id["description"]
        and "not starting with '.'" in (execution_id["description"])
    )
    start = doc["components"]["schemas"]["StartRequest"]
    queued = ("partition_key", "priority", "deduplication_id", "delay", "queue_timeout")
    assert start["dependentRequired"] == {k: ["queue"] for k in queued}
    timeout = next(s for s in start["properties"]["timeout"]["anyOf"] if s.get("type") == "number")
    assert timeout["exclusiveMinimum"] == 0
    wait = doc["paths"]["/executions/{execution_id}/events/{key}"]["get"]["parameters"]
    [bounds] = [p["schema"] for p in wait if p["name"] == "timeout"]
    assert (bounds["minimum"], bounds["maximum"]) == (0, 60)
    # What the schema says is what the route does: a partition key alone is a 400.
    validator = Draft202012Validator(start)
    assert list(validator.iter_errors({"flow": "f", "partition_key": "k"}))
    assert not list(validator.iter_errors({"flow": "f", "partition_key": "k", "queue": "q"}))
    assert list(validator.iter_errors({"flow": "f", "priority": 1}))  # a queue's option


def test_the_partition_key_rule_is_what_the_route_enforces(client: FlaskClient) -> None:
    answer = client.post("/executions", json={"flow": "echo", "partition_key": "k"})
    assert answer.status_code == 400 and "a partition key needs a queue" in answer.json["message"]


def test_the_operators_routes_answer_what_the_document_says(
    client: FlaskClient, runtime: Runtime
) -> None:
    from tests.console.operate import park

    seed(runtime, "echo", {"n": 1}, "p-1")
    park(runtime, "p-1", "poison: 5 calls")
    _check("/dead-letters", "get", client.get("/dead-letters?status=poison"))
    _check("/dead-letters", "get", client.get("/dead-letters?status=nope"))
    redrive = {"status": "poison", "dry_run": True}
    _check("/dead-letters/retry", "post", client.post("/dead-letters/retry", json=redrive))
    answer = client.post("/dead-letters/retry", json=redrive, headers=BEARER)
    _check("/dead-letters/retry", "post", answer)
    assert answer.json["redriven"][0]["action"] == "retry"
    path = "/executions/{execution_id}/retry"
    _check(path, "post", client.post("/executions/p-1/retry", headers=BEARER))
    _check(path, "post", client.post("/executions/p-1/retry", headers=BEARER))  # not parked
    _check("/queues", "get", client.get("/queues"))
    _check("/schedules", "get", client.get("/schedules"))
    _check("/schedules", "get", client.post("/schedules"))


@pytest.mark.parametrize("app", [queue_app.app, schedule_app.app], ids=["queues", "schedules"])
def test_listings_of_an_app_with_queues_and_schedules_fit(app: Any, tmp_path: Path) -> None:
    runtime = Runtime(app, SqliteEventStore(str(tmp_path / "l.db")))
    client = create_wsgi_app(WorkerHandler(runtime)).test_client()
    path = "/queues" if app is queue_app.app else "/schedules"
    answer = client.get(path)
    _check(path, "get", answer)
    assert answer.json[path[1:]]  # not an empty list: the schema met real rows


@pytest.mark.parametrize("method", ["TRACE", "PUT", "DELETE", "CONNECT"])
def test_loom_serve_answers_any_other_method_405_with_allow(method: str, tmp_path: Path) -> None:
    runtime = Runtime(schedule_app.app, SqliteEventStore(str(tmp_path / "l.db")))
    client = create_wsgi_app(WorkerHandler(runtime)).test_client()
    paths = (("/health", ["GET"]), ("/executions", ["POST"]), ("/schedules", ["GET", "POST"]))
    for path, allowed in paths:
        answer = client.open(path, method=method)
        assert answer.status_code == 405, (path, method)
        assert answer.headers["Allow"] == ", ".join(allowed)
        assert answer.json["details"]["allowed"] == allowed
