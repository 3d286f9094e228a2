"""``/health`` is readiness (the store answers a cheap check in time), ``/live`` is liveness
(checks nothing). Both HTTP targets; the stores are in-memory ones made slow or failing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from loom import Loom
from loom.errors import StoreUnavailableError
from loom.runtime import Runtime
from loom.store import InMemoryEventStore
from loom.workers.server import WorkerHandler, create_wsgi_app
from loom.workers.tasks_target import TasksHandler
from tests.functions.test_tasks_target import client_for


class _StuckStore(InMemoryEventStore):
    async def ping(self) -> None:
        await asyncio.sleep(30)


class _ReadOnlyStore(InMemoryEventStore):
    async def ping(self) -> None:
        raise StoreUnavailableError(
            "attempt to write a readonly database", details={"reason": "read_only"}
        )


def _worker(runtime: Runtime) -> Any:
    return create_wsgi_app(WorkerHandler(runtime)).test_client()


def _tasks(runtime: Runtime) -> Any:
    return client_for(TasksHandler(runtime))


CLIENTS: list[Callable[[Runtime], Any]] = [_worker, _tasks]


@pytest.mark.parametrize("client_for", CLIENTS, ids=["worker", "tasks"])
def test_a_store_that_does_not_answer_is_not_ready_but_alive(
    client_for: Callable[[Runtime], Any],
) -> None:
    client = client_for(Runtime(Loom("h"), _StuckStore()))
    started = time.monotonic()
    health = client.get("/health")
    assert time.monotonic() - started < 10  # bounded (2 s by default), not the 30 s stall
    assert health.status_code == 503
    body = json.loads(health.data)
    assert body["healthy"] is False and body["error"]["details"]["reason"] == "timeout"
    live = client.get("/live")
    assert live.status_code == 200 and json.loads(live.data)["alive"] is True


@pytest.mark.parametrize("client_for", CLIENTS, ids=["worker", "tasks"])
def test_a_store_that_fails_its_check_says_why(client_for: Callable[[Runtime], Any]) -> None:
    health = client_for(Runtime(Loom("h"), _ReadOnlyStore())).get("/health")
    assert health.status_code == 503
    error = json.loads(health.data)["error"]
    assert error["code"] == "store_unavailable" and "readonly" in error["message"]


@pytest.mark.parametrize("client_for", CLIENTS, ids=["worker", "tasks"])
def test_a_working_store_is_ready(client_for: Callable[[Runtime], Any]) -> None:
    health = client_for(Runtime(Loom("h"), InMemoryEventStore())).get("/health")
    assert health.status_code == 200 and json.loads(health.data)["healthy"] is True
