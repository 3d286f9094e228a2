"""The load model: one deployment at 10,000 starts a second, projected from a real run.

The real runtime runs a representative mix (:mod:`tests.scale.mix_app`: ten-step flows
that run straight through, sleep on a timer, wait for a resume, run on a queue, fan out to
children and back, and a schedule; then the console's listings, the replay check, a sweep
and a purge) on the Firestore emulator, dispatched through the Cloud Tasks emulator to the
tasks target served over HTTP, with the store, the indexes and the task queues Terraform
declares (``terraform/modules/loom``: its shard count, its queues per class). Every write,
query and dispatch is recorded at the clients with the document, the index range and the
queue it touches (:mod:`tests.scale.recorder`), then projected to 10,000 starts a second
(:mod:`tests.scale.projection`), and the budgets of one deployment are asserted:

* no single document sustains more than 1 write a second;
* no index range takes more than 250 inserts a second at its tail (a monotonic value);
* no task queue dispatches more than 350 tasks a second (Cloud Tasks allows 500);
* every query is served by an index Terraform declares (the emulator checks none);
* every queue shard's admit pass keeps up with the grants its share of the starts needs.

``pytest -k load_model`` selects it; it runs in CI.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask, request
from werkzeug.serving import WSGIRequestHandler, make_server

import loom.workers.tasks_target as tasks_target
from loom.kernel.jobs import Job
from loom.ops.replay_check import ReplayChecker
from loom.primitives.queues import ADMIT_MOST, QueueRef
from loom.runtime import Runtime
from loom.store.browse import BrowseQuery
from loom.store.leases import effective_shards
from loom.workers.loop import BackgroundLoop
from loom.workers.schedule_routes import schedule_tick
from loom.workers.tasks_maintenance import purge_route, start_sweep
from loom_gcp.cloud_tasks import CloudTasksDispatcher
from loom_gcp.firestore import FirestoreEventStore
from loom_gcp.firestore_leases import FirestoreLeaseSet
from tests import procs
from tests.deploy import terraform_model as tm
from tests.gcp_emulators import LOCATION, PROJECT, TasksEmulator
from tests.scale import mix_app
from tests.scale.firestore_model import Declared, backing_index
from tests.scale.projection import Model
from tests.scale.recorder import CAUSE, Recorder, Write

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TARGET = 10_000.0  # starts a second
DOCUMENT_WRITES = 1.0  # sustained writes a second on one document
RANGE_INSERTS = 250.0  # inserts a second at the tail of one index range
QUEUE_DISPATCHES = 350.0  # dispatches a second on one task queue
CLASSES = ("executions", "timers", "admission", "maintenance")
MIX = {"steps": 30, "sleeper": 10, "gated": 10, "queued": 12}
CHILDREN = 40


class _Quiet(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


class Deployment:
    """The mix's deployment: store, dispatcher, tasks target served over HTTP, recorder."""

    def __init__(self, tasks: TasksEmulator, terraform: tm.TerraformDir) -> None:
        self.loop = BackgroundLoop()
        self.declared = Declared.load()
        self.recorder = Recorder(self.declared)
        self.shards = int(terraform.var_default("firestore_shards"))
        self.counts = {c: int(terraform.var_default(f"task_queues_{c}")) for c in CLASSES}
        prefix = f"lm{uuid.uuid4().hex[:10]}"
        parent = f"projects/{PROJECT}/locations/{LOCATION}"
        self._make_queues(tasks, parent, prefix)
        port = procs.free_port()
        self.url = f"http://{procs.LOOPBACK}:{port}"
        counts = "&".join(f"{c}={n}" for c, n in self.counts.items())
        dispatcher = CloudTasksDispatcher(
            f"{parent}/queues/{prefix}?{counts}", f"{self.url}/tasks/execute",
            client=tasks.client(),
        )  # fmt: skip
        self.recorder.watch_tasks(dispatcher.client)
        database = f"lm{uuid.uuid4().hex[:20]}"

        async def open_store() -> FirestoreEventStore:  # (its channel belongs to this loop)
            made = FirestoreEventStore(project=PROJECT, database=database, shards=self.shards)
            self.recorder.watch_firestore(made._client)  # pyright: ignore[reportPrivateUsage]
            return made

        store = self.loop.run(open_store())
        self.runtime = Runtime(mix_app.app, store, dispatcher=dispatcher)
        self.handler = tasks_target.TasksHandler(self.runtime, loop=self.loop)
        self._server = make_server(
            procs.LOOPBACK, port, self._flask(), threaded=True, request_handler=_Quiet
        )
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _make_queues(self, tasks: TasksEmulator, parent: str, prefix: str) -> None:
        from google.cloud import tasks_v2

        client = tasks.client()
        for klass, n in self.counts.items():
            for i in range(n):
                name = f"{parent}/queues/{prefix}-{klass}-{i}"
                client.create_queue(parent=parent, queue=tasks_v2.Queue(name=name))
                tasks._queues.append(name)  # pyright: ignore[reportPrivateUsage]

    def _flask(self) -> Flask:
        app = Flask("load-model")

        def view(path: str = "") -> Any:
            return self.handler(request._get_current_object())  # type: ignore[attr-defined]

        app.add_url_rule("/<path:path>", "tasks", view, methods=["GET", "POST"])
        return app

    def run(self, coro: Any, cause: str = "execution") -> Any:
        async def caused() -> Any:
            CAUSE.set(cause)
            return await coro

        return self.loop.run(caused())

    def close(self) -> None:
        self._server.shutdown()
        self.loop.run(self.runtime.store.aclose())


@pytest.fixture
def deployment(firestore_emulator: str, tasks_emulator: TasksEmulator) -> Iterator[Deployment]:
    made = Deployment(tasks_emulator, tm.load_dir(tm.MODULE_DIR))
    real_run_job = tasks_target.run_job

    async def run_job(runtime: Runtime, job: Job) -> dict[str, Any]:
        CAUSE.set(f"job:{job.kind}:{job.key}")  # what a job does is the job's
        return await real_run_job(runtime, job)

    tasks_target.run_job = run_job
    try:
        yield made
    finally:
        tasks_target.run_job = real_run_job
        made.close()


def _statuses(d: Deployment, ids: list[str]) -> list[str]:
    async def read() -> list[str]:
        return [(await d.runtime.store.summary(e)).status for e in ids]

    return d.run(read(), "console")


def _wait(what: str, check: Any, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _the_mix(d: Deployment) -> list[str]:
    """Start the mix, resume the gated flows, and wait for everything to finish."""
    rt = d.runtime
    ids: list[str] = []

    async def start_all() -> None:
        for flow, n in MIX.items():
            for i in range(n):
                eid = f"{flow}-{i:03d}-{uuid.uuid4().hex[:6]}"
                queue = QueueRef("work", f"p{i % 3}") if flow == "queued" else None
                await rt.start(flow, i, execution_id=eid, queue=queue)
                ids.append(eid)
        eid = f"parent-{uuid.uuid4().hex[:6]}"
        await rt.start("parent", CHILDREN, execution_id=eid)
        ids.append(eid)
        await schedule_tick(rt)  # the minutely tick: a job per schedule shard and minute

    d.run(start_all())
    gated = [e for e in ids if e.startswith("gated-")]
    _wait("the gated flows to wait", lambda: set(_statuses(d, gated)) == {"suspended"})
    for eid in gated:
        d.run(rt.resume(eid, "go", f"{eid}:go", 1))
    _wait("the mix to finish", lambda: set(_statuses(d, ids)) == {"completed"})
    return ids


def _operate(d: Deployment) -> None:
    """What operators and maintenance do: the console, the replay check, a sweep, a purge."""
    rt = d.runtime

    async def console() -> None:
        await rt.store.browse(BrowseQuery(limit=50))
        await rt.store.browse(BrowseQuery(status="completed", flow="steps", limit=20))
        await rt.store.list("running", limit=100)
        await rt.store.count_by_status()
        await ReplayChecker(mix_app.app, rt.store, sample=20).run(lambda checked: None)

    d.run(console(), "console")
    d.run(start_sweep(rt, grace=60.0), "console")
    time.sleep(1.1)
    env = {"LOOM_RETENTION": "1s", "LOOM_PURGE_BUDGET": "60"}
    d.run(purge_route(rt, env), "console")

    def purged() -> bool:
        counts = d.run(rt.store.count_by_status(), "console")
        return sum(counts.values()) == 0

    _wait("the purge to delete everything", purged)


def _intervals(terraform: tm.TerraformDir) -> dict[str, float]:
    """Seconds between two runs of a job of each kind, per shard (its key's interval)."""
    sweep = str(terraform.var_default("sweep_schedule"))
    purge = str(terraform.var_default("purge_schedule"))
    assert sweep.startswith("*/") and sweep.endswith(" * * * *"), sweep
    assert purge.split()[1:] == ["*", "*", "*", "*"], purge  # hourly
    return {
        "admit": FirestoreLeaseSet.admit_interval,
        "schedules": 60.0,
        "sweep": 60.0 * int(sweep.split()[0][2:]),
        "purge": 3600.0,
    }


def test_load_model_at_10000_starts_per_second(deployment: Deployment) -> None:
    d = deployment
    ids = _the_mix(d)
    _operate(d)
    rec = d.recorder
    created = {
        w.path for w in rec.writes if w.path.count("/") == 1 and w.path.startswith("executions/")
    }
    assert len(created) >= len(ids) + CHILDREN  # children and the schedule's tick too
    terraform = tm.load_dir(tm.MODULE_DIR)
    queue_shards = {name: effective_shards(q.limits()) for name, q in mix_app.app.queues.items()}
    model = Model(
        rec, len(created), TARGET, d.shards, _intervals(terraform), d.counts, queue_shards
    )
    model.documents(DOCUMENT_WRITES)
    model.ranges(RANGE_INSERTS)
    model.queues(QUEUE_DISPATCHES)
    report = model.report()
    print(report)
    over = [f for found in model.findings.values() for f in found if not f.ok]
    assert not over, "over budget:\n" + "\n".join(f.line() for f in over) + "\n\n" + report

    # The budgets bind: the same run on one shard and one queue per class is over them.
    small = Model(rec, len(created), TARGET, 1, model.intervals, dict.fromkeys(CLASSES, 1), {})
    assert any(not f.ok for f in small.ranges(RANGE_INSERTS))
    assert any(not f.ok for f in small.queues(QUEUE_DISPATCHES))

    unbacked = {
        r.query.shape() for r in rec.reads if r.query and not backing_index(r.query, d.declared)
    }
    assert not unbacked, f"queries no declared index serves: {sorted(unbacked)}"
    assert len([r for r in rec.reads if r.query]) > 50  # the check saw the store's queries

    # Each job of a kind runs once per shard and interval: its task is named by its key.
    job_keys = [t.key for t in rec.tasks if t.kind.startswith("job:")]
    assert job_keys and all("@" in k for k in job_keys), job_keys[:5]
    assert len(job_keys) == len(set(job_keys))

    # Admission keeps up: the grants a queue shard must make a second at the target rate.
    enqueued = sum(1 for w in rec.writes if "/queued/" in w.path and not w.delete)
    assert enqueued >= MIX["queued"]  # every queued execution waited for a pass
    for name, shards in queue_shards.items():
        needed = enqueued * model.scale / shards
        capacity = ADMIT_MOST / FirestoreLeaseSet.admit_interval
        assert needed <= capacity, f"queue {name!r}: {needed:.0f} grants/s a shard"
    print(json.dumps({"starts": model.starts, "enqueued": enqueued}))


def test_the_load_model_fails_a_hot_document() -> None:
    """The model's arithmetic on a made-up run: a shared document written once per start
    is over budget at the target rate; the same writes by a job once an interval are not."""
    rec = Recorder(Declared.load())
    now = time.time()
    rec.writes += [Write(now + i, "loom_queues/q/shards/0", False, "execution") for i in range(3)]
    model = Model(rec, 100, TARGET, 64, {"admit": 1.0}, dict.fromkeys(CLASSES, 1), {})
    [hot] = model.documents(DOCUMENT_WRITES)
    assert not hot.ok and hot.rate == pytest.approx(300.0)
    rec.writes[:] = [
        Write(now + i, "loom_queues/q/shards/0", False, f"job:admit:q/0@{i}") for i in range(3)
    ]
    [batched] = model.documents(DOCUMENT_WRITES)
    assert batched.ok and batched.rate == pytest.approx(1.0)
