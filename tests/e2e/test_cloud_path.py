"""The whole cloud path on emulators, end to end.

Firestore emulator (the store), the Cloud Tasks emulator (dispatch, durable timers; every
task that succeeds is delivered a second time), the Pub/Sub emulator (a push subscription
starts the flow) and four functions-framework processes built from ``functions/main.py``:
the ``events`` target, the ``worker`` target (resume over HTTP) and two ``tasks`` instances
behind one URL. A flow started by a Pub/Sub message runs a step, waits on a gate resumed
over HTTP, sleeps on a durable timer delivered by Cloud Tasks, and is SIGKILLed inside the
next step; the task is redelivered to the other instance, which finishes it. The log ends
gap-free and, claims aside, equal to the history of the same flow run in-process once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loom.testing import LoomTestEnv
from loom_gcp.cloud_tasks import task_id
from tests import procs
from tests.e2e import cloud_app
from tests.e2e.frontend import Frontend
from tests.gcp_emulators import PROJECT, TasksEmulator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
MAIN = REPO / "functions" / "main.py"
SECRET = "e2e-resume-secret-0123456789"
ORDER = {"order_id": "o-1", "items": [1200, 150], "cool_off_s": 1.0}
APPROVAL = {"by": "ops@example.com"}


def wait_until(what: str, check: Callable[[], Any], timeout: float = 25.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_port(server: procs.Server, timeout: float = 30.0) -> None:
    def accepts() -> bool:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited:\n{server.log_tail()}")
        with socket.socket() as sock:
            return sock.connect_ex((procs.LOOPBACK, server.port)) == 0

    wait_until(f"{server.name} to listen", accepts, timeout)


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read())


@dataclass
class Cloud:
    """Everything started for one test."""

    queue: str
    tasks: TasksEmulator
    frontend: Frontend
    instances: list[procs.Server]
    worker: procs.Server
    events: procs.Server
    side: Path

    def execution(self, eid: str, history: bool = False) -> Any:
        url = f"http://{self.worker.host}/executions/{eid}?history={str(history).lower()}"
        return http("GET", url)


def start_target(name: str, target: str, env: dict[str, str], log_dir: Path) -> procs.Server:
    port = procs.free_port()
    argv = [
        sys.executable,
        "-m",
        "functions_framework",
        "--source",
        str(MAIN),
        "--target",
        target,
        "--host",
        procs.LOOPBACK,
        "--port",
        str(port),
    ]
    return procs.start(name, argv, port=port, log_path=log_dir / f"{name}.log", env=env)


@pytest.fixture
def cloud(
    firestore_emulator: str,
    tasks_emulator: TasksEmulator,
    pubsub_emulator: str,
    tmp_path: Path,
) -> Iterator[Cloud]:
    side = tmp_path / "side"
    side.mkdir()
    queue = tasks_emulator.new_queue(duplicate=True)
    frontend = Frontend()
    frontend.start()
    env = {
        **procs.OFFLINE_ENV,
        "PYTHONPATH": str(REPO),
        "THREADS": "8",
        "FIRESTORE_EMULATOR_HOST": firestore_emulator,
        "CLOUD_TASKS_EMULATOR_HOST": tasks_emulator.host,
        "LOOM_APP": "tests.e2e.cloud_app:app",
        "LOOM_STORE": f"firestore://{PROJECT}/e2e-{uuid.uuid4().hex[:16]}",
        "LOOM_DISPATCH": f"cloudtasks://{queue}",
        "LOOM_TASKS_TARGET_URL": frontend.url,
        "LOOM_RESUME_SECRET": SECRET,
        # A killed holder's claim lapses after this at the latest (on this host a dead pid
        # already releases it, once the process is reaped).
        "LOOM_CLAIM_TTL": "5",
        "LOOM_E2E_DIR": str(side),
    }
    servers = [
        start_target("tasks-a", "tasks", env, tmp_path),
        start_target("tasks-b", "tasks", env, tmp_path),
        start_target("worker", "worker", env, tmp_path),
        start_target("events", "events", env, tmp_path),
    ]
    try:
        for server in servers[:3]:
            procs.wait_http_ready(server, "/health", timeout=30)
        wait_port(servers[3])
        frontend.backends = [s.host for s in servers[:2]]
        yield Cloud(queue, tasks_emulator, frontend, servers[:2], servers[2], servers[3], side)
    finally:
        for server in servers:
            procs.stop(server)
        frontend.stop()


def push_subscription(events_url: str) -> str:
    """A topic with a push subscription to the events target; returns the topic path."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    suffix = uuid.uuid4().hex[:12]
    topic = publisher.topic_path(PROJECT, f"loom-{suffix}")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(
        name=subscriber.subscription_path(PROJECT, f"loom-push-{suffix}"),
        topic=topic,
        push_config=pubsub_v1.types.PushConfig(push_endpoint=events_url),
        ack_deadline_seconds=10,
    )
    subscriber.close()
    return topic


def publish(topic: str, message: dict[str, Any]) -> str:
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    return str(publisher.publish(topic, json.dumps(message).encode()).result(timeout=30))


def normalized(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history without what differs between runs: claims, times, durations, and who
    asked (``by``: a principal over HTTP and Pub/Sub, unset on the in-process reference)."""
    volatile = {"seq", "at", "duration_s", "wake_at", "until", "holder", "by"}
    return [
        {k: v for k, v in e.items() if k not in volatile}
        for e in events
        if e["type"] != "ExecutionClaimed"
    ]


def reference_history(eid: str) -> list[dict[str, Any]]:
    """The same flow run once, in-process, on the in-memory store."""

    async def run() -> list[dict[str, Any]]:
        env = LoomTestEnv(cloud_app.app)
        # (The id is a Pub/Sub start's, an engine form: this stands in for that start.)
        await env.start("e2e.order", ORDER, execution_id=eid, derived="pubsub")
        await env.runtime.resume(eid, "approval", f"{eid}:approval", APPROVAL)
        await env.skip(ORDER["cool_off_s"] + 1)
        return [e.model_dump(mode="json") for e in await env.history(eid)]

    saved = os.environ.pop("LOOM_E2E_DIR", None)
    try:
        return asyncio.run(run())
    finally:
        if saved is not None:
            os.environ["LOOM_E2E_DIR"] = saved


def dispatch_ids(eid: str, events: list[dict[str, Any]]) -> list[str]:
    """The dispatch ids the runtime used: the start, the resume's seq, the timer's seq."""
    resumed = next(
        e["seq"] for e in events if e["type"] == "ExecutionResumed" and e["on"] == "approval"
    )
    slept = next(
        e["seq"] for e in events if e["type"] == "ExecutionSuspended" and e["on"] == "loom.timer"
    )
    return [f"{eid}:1", f"{eid}:{resumed}", f"{eid}:{slept}:timer"]


def calls(side: Path) -> list[tuple[str, str, int]]:
    lines = (side / "calls.log").read_text().splitlines()
    return [(key, effect, int(pid)) for key, effect, pid in (line.split() for line in lines)]


def test_the_cloud_path_end_to_end(cloud: Cloud) -> None:
    topic = push_subscription(f"http://{cloud.events.host}/")
    message_id = publish(topic, {"action": "start", "flow": "e2e.order", "input": ORDER})
    eid = f"pubsub-{message_id}"  # a start without an id is named after its message

    def waiting_on(on: str) -> bool:
        try:
            state = cloud.execution(eid)
        except urllib.error.HTTPError:
            return False  # not created yet
        return any(g["on"] == on for g in state["execution"]["waiting_on"])

    wait_until("the flow to wait on its gate", lambda: waiting_on("approval"))
    http(
        "POST",
        f"http://{cloud.worker.host}/executions/{eid}/resume",
        {"on": "approval", "correlation_key": f"{eid}:approval", "payload": APPROVAL},
        {"Authorization": f"Bearer {SECRET}"},
    )

    # The durable timer fires through Cloud Tasks; the next step blocks in one instance.
    held = wait_until("a worker to enter the held step", lambda: (cloud.side / "held").exists())
    assert held
    holder_pid = int(wait_until("the holder's pid", lambda: (cloud.side / "held").read_text()))
    [victim] = [s for s in cloud.instances if os.getpgid(holder_pid) == s.proc.pid]
    os.killpg(victim.proc.pid, signal.SIGKILL)

    def completed() -> Any:
        state = cloud.execution(eid)["execution"]
        return state if state["status"] == "completed" else None

    final = wait_until("the other worker to finish it", completed)
    assert final["output"] == {
        "total": 1350,
        "approved_by": "ops@example.com",
        "held": f"held:1350:{eid}:4",
        "shipment": f"shipment-{eid}:5",
    }

    events = cloud.execution(eid, history=True)["history"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "gap in the log"
    assert normalized(events) == normalized(reference_history(eid))

    # Each step ran once, except the one the killed worker was inside.
    ran = calls(cloud.side)
    assert Counter(effect for _, effect, _ in ran) == {"e2e.quote": 1, "e2e.hold": 2, "e2e.ship": 1}
    hold_pids = [pid for _, effect, pid in ran if effect == "e2e.hold"]
    assert hold_pids[0] == holder_pid and hold_pids[1] != holder_pid

    # One task per dispatch (start, resume, timer), named by the hash of its dispatch id;
    # every task that succeeded was delivered twice; the killed delivery failed and was retried.
    expected = {cloud.queue + "/tasks/" + task_id(d) for d in dispatch_ids(eid, events)}

    def delivered_twice() -> bool:
        ok = Counter(n for n, status in cloud.tasks.deliveries(cloud.queue) if status < 300)
        return not cloud.tasks.pending(cloud.queue) and all(ok[n] >= 2 for n in expected)

    wait_until("every task and its duplicate to be delivered", delivered_twice, timeout=15)
    deliveries = cloud.tasks.deliveries(cloud.queue)
    assert {name for name, _ in deliveries} == expected
    ok = Counter(name for name, status in deliveries if 200 <= status < 300)
    assert set(ok.values()) == {2}, deliveries
    assert any(status >= 500 for _, status in deliveries), "the killed delivery was not retried"
    survivors = {backend for backend, _, status in cloud.frontend.served if status == 200}
    assert survivors == {s.host for s in cloud.instances}, "both instances served tasks"
