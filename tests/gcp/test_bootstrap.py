"""``loom_gcp.bootstrap``: one image, every target, composed from environment variables."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ConfigurationError
from loom.events import ExecutionStarted
from loom.store.memory import InMemoryEventStore
from loom.workers.local import LocalWorkerRuntime
from loom.workers.remote import RemoteWorkerRuntime
from loom_gcp.bootstrap import PinnedEventStore, build_runtime, build_store, open_worker
from loom_gcp.cloud_run import CloudRunWorkerRuntime
from loom_gcp.cloud_tasks import CloudTasksDispatcher

APP = "tests.functions.apps:app"
QUEUE = "projects/p/locations/l/queues/q"
SERVICE = "projects/p/locations/l/services/loom-worker"


def env(**extra: str) -> dict[str, str]:
    return {"LOOM_APP": APP, "LOOM_STORE": "memory://", **extra}


def test_without_a_dispatcher_setting_control_calls_run_inline() -> None:
    runtime = build_runtime(env())
    assert runtime.dispatcher is None
    assert isinstance(runtime.store, InMemoryEventStore)
    assert runtime.claim_ttl == 30.0


def test_cloud_tasks_dispatch_from_the_environment() -> None:
    runtime = build_runtime(
        env(
            LOOM_DISPATCH=f"cloudtasks://{QUEUE}",
            LOOM_TASKS_TARGET_URL="https://loom-tasks.example",
            LOOM_TASKS_SERVICE_ACCOUNT="sa@p.iam.gserviceaccount.com",
            LOOM_CLAIM_TTL="12.5",
        )
    )
    dispatcher = runtime.dispatcher
    assert isinstance(dispatcher, CloudTasksDispatcher)
    assert (dispatcher.queue, dispatcher.target_url) == (
        QUEUE,
        "https://loom-tasks.example/tasks/execute",
    )
    assert dispatcher.service_account == "sa@p.iam.gserviceaccount.com"
    assert runtime.claim_ttl == 12.5


@pytest.mark.parametrize(
    ("worker", "kind"),
    [
        (None, LocalWorkerRuntime),
        ("local://", LocalWorkerRuntime),
        ("http://127.0.0.1:9/", RemoteWorkerRuntime),
        (f"cloudrun://{SERVICE}", CloudRunWorkerRuntime),
    ],
)
def test_in_process_dispatch_to_the_named_worker(worker: str | None, kind: type) -> None:
    extra = {"LOOM_DISPATCH": "inprocess://", **({"LOOM_WORKER": worker} if worker else {})}
    runtime = build_runtime(env(**extra))
    assert isinstance(runtime.dispatcher, InProcessDispatcher)
    assert type(runtime.dispatcher.worker) is kind


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"LOOM_DISPATCH": "carrier-pigeon://"}, "LOOM_DISPATCH"),
        ({"LOOM_DISPATCH": f"cloudtasks://{QUEUE}"}, "LOOM_TASKS_TARGET_URL"),
        ({"LOOM_DISPATCH": "inprocess://", "LOOM_WORKER": "ftp://x"}, "LOOM_WORKER"),
        ({"LOOM_CLAIM_TTL": "soon"}, "LOOM_CLAIM_TTL"),
        ({"LOOM_STORE": "nosuch://x"}, "nosuch"),
    ],
)
def test_bad_settings_are_named_in_the_error(extra: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        build_runtime(env(**extra))


def test_open_worker_refuses_a_bad_cloud_run_url() -> None:
    with pytest.raises(ConfigurationError):
        open_worker("cloudrun://projects/p/services/s", build_runtime(env()))


@pytest.mark.slow
def test_a_firestore_store_serves_callers_on_any_loop(firestore_emulator: str) -> None:
    """An HTTP worker may run each request on a fresh loop and thread; the async Firestore
    client is bound to one loop, so the pinned store runs it on the process loop."""
    store = build_store({"LOOM_STORE": f"firestore://loom-test/b{uuid.uuid4().hex[:20]}"})
    assert isinstance(store, PinnedEventStore)
    results: list[Any] = []

    def request(n: int) -> None:  # a request thread with its own asyncio.run
        started = ExecutionStarted(execution_id=f"e{n}", flow="f", input=n)
        results.append(asyncio.run(store.create(started))[0])
        results.append(asyncio.run(store.load(f"e{n}")).last_seq)

    threads = [threading.Thread(target=request, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results, key=str) == [1, 1, 1, 1, True, True, True, True]


def test_in_process_dispatch_is_refused_on_cloud_run() -> None:
    """Cloud Run sets K_SERVICE; in-process timers would die with CPU throttling there."""
    with pytest.raises(ConfigurationError, match=r"inprocess:// .*Cloud Run.*K_SERVICE='loom'"):
        build_runtime(env(LOOM_DISPATCH="inprocess://", K_SERVICE="loom"))
    assert build_runtime(env(LOOM_DISPATCH="inprocess://", K_SERVICE="")).dispatcher is not None


def test_loom_serve_refuses_to_run_its_timers_on_cloud_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loom.workers.server import serve_forever

    monkeypatch.setenv("K_SERVICE", "loom-worker")
    with pytest.raises(SystemExit, match="cannot run on Cloud Run"):
        serve_forever(APP, "memory://", "127.0.0.1", 0)


async def test_the_pinned_store_forwards_paging_and_deletion() -> None:
    inner = InMemoryEventStore()
    pinned = PinnedEventStore(inner)
    for eid in ("a", "b", "c"):
        await pinned.create(ExecutionStarted(execution_id=eid, flow="f", input=None))
        await asyncio.sleep(0.01)
    [first] = await pinned.list(limit=1, oldest_first=True)
    rest = await pinned.list(oldest_first=True, after=first.cursor)
    assert [first.execution_id, *(r.execution_id for r in rest)] == ["a", "b", "c"]
    assert await pinned.delete_execution("b") is True
    assert [r.execution_id for r in await inner.list()] == ["c", "a"]
