"""``CloudTasksDispatcher`` against the Cloud Tasks emulator, delivering real HTTP requests."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage
from loom_gcp.cloud_tasks import CloudTasksDispatcher, task_id
from tests import procs
from tests.functions.apps import app
from tests.gcp_emulators import TasksEmulator

pytestmark = pytest.mark.slow


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict[str, Any]
    at: float


@dataclass
class Receiver:
    """An HTTP endpoint that records what Cloud Tasks delivers and answers ``statuses``."""

    url: str
    deliveries: list[Delivery] = field(default_factory=list[Delivery])
    statuses: list[int] = field(default_factory=list[int])  # answered in order, then 200
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Delivery]:
        with self.arrived:
            ok = self.arrived.wait_for(lambda: len(self.deliveries) >= count, timeout)
        assert ok, f"{len(self.deliveries)} of {count} deliveries after {timeout}s"
        return self.deliveries


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    port = procs.free_port()
    rec = Receiver(url=f"http://{procs.LOOPBACK}:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = rec.statuses.pop(0) if rec.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            with rec.arrived:
                rec.deliveries.append(Delivery(self.path, headers, body, time.time()))
                rec.arrived.notify_all()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    httpd = ThreadingHTTPServer((procs.LOOPBACK, port), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield rec
    httpd.shutdown()
    httpd.server_close()


def make(tasks_emulator: TasksEmulator, receiver: Receiver, **kw: Any) -> CloudTasksDispatcher:
    queue = tasks_emulator.new_queue(**kw)
    return CloudTasksDispatcher(queue, receiver.url, client=tasks_emulator.client())


def package(eid: str) -> ExecutionPackage:
    return ExecutionPackage(execution_id=eid, flow="f", reason="start")


async def test_a_dispatch_arrives_as_a_post_with_the_package_and_task_headers(
    tasks_emulator: TasksEmulator, receiver: Receiver
) -> None:
    d = make(tasks_emulator, receiver)
    await d.dispatch(package("e1"), "e1:1")
    [got] = receiver.wait_for(1)
    assert got.path == "/tasks/execute"
    assert got.body["executionPackage"]["dispatch_id"] == "e1:1"
    assert got.headers["x-cloudtasks-taskname"] == task_id("e1:1")
    assert got.headers["x-cloudtasks-queuename"] == d.queue
    assert got.headers["x-cloudtasks-taskretrycount"] == "0"


async def test_the_same_dispatch_id_twice_is_one_task_and_no_error(
    tasks_emulator: TasksEmulator, receiver: Receiver
) -> None:
    d = make(tasks_emulator, receiver)
    await d.dispatch(package("e1"), "e1:1")
    await d.dispatch(package("e1"), "e1:1")  # ALREADY_EXISTS, taken as success
    await d.dispatch(package("e1"), "e1:2")
    receiver.wait_for(2)
    await asyncio.sleep(0.5)  # a second e1:1 would have arrived by now
    assert sorted(x.body["executionPackage"]["dispatch_id"] for x in receiver.deliveries) == [
        "e1:1",
        "e1:2",
    ]


async def test_a_timer_is_not_delivered_before_its_time(
    tasks_emulator: TasksEmulator, receiver: Receiver
) -> None:
    d = make(tasks_emulator, receiver)
    wake = time.time() + 1.0
    await d.dispatch(package("e1"), "e1:5:timer", not_before=wake)
    assert len(tasks_emulator.pending(d.queue)) == 1
    [got] = receiver.wait_for(1, timeout=5)
    assert got.at >= wake
    assert got.body["notBefore"] == wake


async def test_a_failed_delivery_is_retried_with_the_retry_count(
    tasks_emulator: TasksEmulator, receiver: Receiver
) -> None:
    receiver.statuses = [503, 500]
    d = make(tasks_emulator, receiver)
    await d.dispatch(package("e1"), "e1:1")
    got = receiver.wait_for(3)
    assert [x.headers["x-cloudtasks-taskretrycount"] for x in got] == ["0", "1", "2"]
    assert {x.headers["x-cloudtasks-taskname"] for x in got} == {task_id("e1:1")}


async def test_a_duplicating_queue_delivers_each_task_twice(
    tasks_emulator: TasksEmulator, receiver: Receiver
) -> None:
    d = make(tasks_emulator, receiver, duplicate=True)
    await d.dispatch(package("e1"), "e1:1")
    got = receiver.wait_for(2)
    assert [x.body for x in got[:1]] == [x.body for x in got[1:]]


async def test_a_repeated_start_of_a_created_execution_dispatches_it_once(
    tasks_emulator: TasksEmulator, receiver: Receiver, tmp_path: Path
) -> None:
    """A start that died between its append and its dispatch, then the same start again:
    the repeat creates the task the first one never did, under the first start's name, so
    a further repeat (or a first start that had in fact dispatched) makes no second one."""
    rt = Runtime(
        app, SqliteEventStore(tmp_path / "loom.db"), dispatcher=make(tasks_emulator, receiver)
    )
    assert (await rt.start("echo", {"n": 1}, execution_id="e1", run=False)).status == "running"
    await asyncio.sleep(0.5)
    assert receiver.deliveries == []
    for _ in range(3):
        assert (await rt.start("echo", {"n": 1}, execution_id="e1")).status == "running"
    [got] = receiver.wait_for(1)
    assert got.body["executionPackage"]["dispatch_id"] == "e1:1"
    await asyncio.sleep(0.5)  # a second task would have arrived by now
    assert len(receiver.deliveries) == 1
    await rt.store.aclose()
