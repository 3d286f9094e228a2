"""A delivery that meets another holder's live claim, through the Cloud Tasks emulator.

The tasks target is served over real HTTP (werkzeug) and the emulator delivers the tasks the
real ``CloudTasksDispatcher`` created: the superseded delivery is answered 2xx (a 429/503
would make Cloud Tasks slow the whole queue down), and the follow-up task it enqueued runs
the execution once the claim has lapsed, so nothing is stranded.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, Request, request
from werkzeug.serving import make_server

from loom import events as ev
from loom.runtime import Runtime
from loom.store.base import AppendRequest
from loom.store.sqlite import SqliteEventStore
from loom.wire import ExecutionPackage
from loom.workers.loop import BackgroundLoop
from loom.workers.tasks_target import TasksHandler
from loom_gcp.cloud_tasks import CloudTasksDispatcher, task_id
from tests import procs
from tests.functions.test_tasks_target import app, calls
from tests.gcp_emulators import TasksEmulator

pytestmark = pytest.mark.slow


def serve(handler: TasksHandler) -> Iterator[str]:
    flask_app = Flask("superseded-emulator")

    def view(path: str = "") -> Any:
        req: Request = request._get_current_object()  # type: ignore[attr-defined]
        return handler(req)

    flask_app.add_url_rule("/<path:path>", "tasks", view, methods=["GET", "POST"])
    server = make_server(procs.LOOPBACK, 0, flask_app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://{procs.LOOPBACK}:{server.port}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def target(
    tmp_path: Path, tasks_emulator: TasksEmulator
) -> Iterator[tuple[Runtime, BackgroundLoop, str]]:
    calls.clear()
    loop = BackgroundLoop()
    runtime = Runtime(app, SqliteEventStore(tmp_path / "t.db"))
    for url in serve(TasksHandler(runtime, loop=loop)):
        queue = tasks_emulator.new_queue()
        runtime.dispatcher = CloudTasksDispatcher(queue, url, client=tasks_emulator.client())
        yield runtime, loop, queue
    loop.run(runtime.store.aclose())


def wait_until(check: Any, timeout: float) -> None:
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def test_a_superseded_delivery_is_2xx_and_its_follow_up_finishes_the_execution(
    target: tuple[Runtime, BackgroundLoop, str], tasks_emulator: TasksEmulator
) -> None:
    runtime, loop, queue = target
    loop.run(runtime.start("echo", "hi", execution_id="e1", run=False))
    now = time.time()
    claim = ev.ExecutionClaimed(holder="another-host:7:1", until=now + 2, seq=2, at=now)
    loop.run(runtime.store.append(AppendRequest("e1", 1, [claim])))
    package = ExecutionPackage(execution_id="e1", flow="echo", reason="start")
    assert runtime.dispatcher is not None
    loop.run(runtime.dispatcher.dispatch(package, "e1:1"))

    wait_until(lambda: len(tasks_emulator.deliveries(queue)) >= 2, timeout=20)
    names = [n.rsplit("/", 1)[1] for n, _ in tasks_emulator.deliveries(queue)]
    statuses = [s for _, s in tasks_emulator.deliveries(queue)]
    follow_up = f"e1:1:held@{math.ceil(now + 2) + 1}"
    assert names[:2] == [task_id("e1:1"), task_id(follow_up)]
    assert statuses[:2] == [200, 200]  # never a 503 that would throttle the queue
    wait_until(lambda: loop.run(runtime.result("e1")).status == "completed", timeout=10)
    assert calls == ["e1:1"]
    assert tasks_emulator.pending(queue) == []
