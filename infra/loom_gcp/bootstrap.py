"""Composition from the environment, so one container image serves every target.

=====================  =================================================================
``LOOM_APP``           ``module:attr`` of the :class:`~loom.app.Loom` app (required)
``LOOM_STORE``         ``memory://``, ``sqlite:///path``, ``firestore://PROJECT/DATABASE``
``LOOM_BLOBS``         ``file:///dir``, ``gs://bucket/prefix``, ``s3://bucket/prefix``
                       (default: a ``blobs`` directory beside a SQLite database)
``LOOM_DISPATCH``      unset or ``inline://``: control calls run executions inline;
                       ``cloudtasks://projects/P/locations/L/queues/Q``: one Cloud Tasks task
                       per dispatch (with ``LOOM_TASKS_TARGET_URL``,
                       ``LOOM_TASKS_SERVICE_ACCOUNT``, ``LOOM_TASKS_AUDIENCE``,
                       ``LOOM_TASKS_DISPATCH_DEADLINE``); ``inprocess://``: this process
                       dispatches to ``LOOM_WORKER``
``LOOM_WORKER``        unset or ``local://``: in this process; ``http(s)://host``: an HTTP
                       worker; ``cloudrun://projects/P/locations/L/services/S``: a private
                       Cloud Run service (URL from the Admin API, ID token attached)
``LOOM_CLAIM_TTL``     seconds a claim lasts without being extended (default 30)
=====================  =================================================================

Google client libraries are imported only when a setting needs them: importing this module
costs a cold start nothing beyond the engine.

The Firestore store's async client is bound to the event loop that first uses it. The
targets all run on the process loop (:data:`~loom.workers.loop.PROCESS_LOOP`), but a caller
on another loop (a script's ``asyncio.run``, a test) would break it for everyone else;
:class:`PinnedEventStore` (:mod:`loom_gcp.pinned`) runs every store call on the process loop,
so any loop can use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from loom.blobs import BlobStore, LocalBlobStore
from loom.config import load_app, open_blob_store, open_store, refuse_inprocess_on_cloud_run
from loom.dispatch.base import Dispatcher
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ConfigurationError
from loom.extras import requires_extra
from loom.runtime import Runtime
from loom.store.base import (
    EventStore,
)
from loom.workers.base import WorkerRuntime
from loom.workers.local import LocalWorkerRuntime
from loom.workers.remote import RemoteWorkerRuntime
from loom_gcp.pinned import PinnedEventStore, PinnedInbox, PinnedLeaseSet, PinnedScheduleStore

__all__ = [
    "PinnedEventStore",
    "PinnedInbox",
    "PinnedLeaseSet",
    "PinnedScheduleStore",
    "build_blobs",
    "build_runtime",
    "build_store",
    "open_dispatcher",
    "open_worker",
]


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def build_store(env: Mapping[str, str] | None = None) -> EventStore:
    """The event store of ``LOOM_STORE``; a Firestore one pinned to the process loop."""
    url = _env(env).get("LOOM_STORE")
    store = open_store(url)
    if (url or "").startswith("firestore://"):
        return PinnedEventStore(store)
    return store


def build_blobs(env: Mapping[str, str] | None = None) -> BlobStore | None:
    """``LOOM_BLOBS``, or a ``blobs`` directory beside a SQLite database, or none."""
    env = _env(env)
    blobs = open_blob_store(env.get("LOOM_BLOBS"))
    if blobs is not None:
        return blobs
    store_url = env.get("LOOM_STORE") or ""
    if store_url.startswith("sqlite:///"):
        return LocalBlobStore(Path(store_url[len("sqlite:///") :]).parent / "blobs")
    return None


def open_worker(url: str | None, runtime: Runtime) -> WorkerRuntime:
    """The worker runtime a URL names (see the module docstring).

    Raises:
        ConfigurationError: An unknown scheme.
    """
    if not url or url.startswith("local://"):
        return LocalWorkerRuntime(runtime)
    if url.startswith(("http://", "https://")):
        return RemoteWorkerRuntime(url)
    if url.startswith("cloudrun://"):
        with requires_extra("LOOM_WORKER cloudrun://"):  # Google clients: only if used
            from loom_gcp.cloud_run import CloudRunWorkerRuntime

        return CloudRunWorkerRuntime.from_url(url)
    raise ConfigurationError(
        f"LOOM_WORKER {url!r}: expected local://, http(s)://host or "
        "cloudrun://projects/P/locations/L/services/S"
    )


def open_dispatcher(
    url: str | None, runtime: Runtime, env: Mapping[str, str] | None = None
) -> Dispatcher | None:
    """The dispatcher a URL names (see the module docstring); ``None`` runs inline.

    Raises:
        ConfigurationError: An unknown scheme or incomplete Cloud Tasks settings.
    """
    env = _env(env)
    if not url or url.startswith("inline://"):
        return None
    if url.startswith("cloudtasks://"):
        with requires_extra("LOOM_DISPATCH cloudtasks://"):  # Google clients: only if used
            from loom_gcp.cloud_tasks import CloudTasksDispatcher

        return CloudTasksDispatcher.from_url(url, env)
    if url.startswith("inprocess://"):
        refuse_inprocess_on_cloud_run(env)
        return InProcessDispatcher(open_worker(env.get("LOOM_WORKER"), runtime))
    raise ConfigurationError(
        f"LOOM_DISPATCH {url!r}: expected inline://, inprocess:// or "
        "cloudtasks://projects/P/locations/L/queues/Q"
    )


def _claim_ttl(env: Mapping[str, str]) -> float:
    raw = env.get("LOOM_CLAIM_TTL") or "30"
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"LOOM_CLAIM_TTL must be seconds, got {raw!r}") from None


def build_runtime(env: Mapping[str, str] | None = None) -> Runtime:
    """The runtime every target serves, composed from the environment.

    Raises:
        ConfigurationError: A missing or bad setting (named in the message).
    """
    env = _env(env)
    runtime = Runtime(
        load_app(env.get("LOOM_APP")),
        build_store(env),
        blobs=build_blobs(env),
        claim_ttl=_claim_ttl(env),
    )
    runtime.dispatcher = open_dispatcher(env.get("LOOM_DISPATCH"), runtime, env)
    return runtime
