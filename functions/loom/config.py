"""The composition root: stores, blob stores and apps from URLs and environment variables.

``LOOM_STORE``: ``memory://``, ``sqlite:///relative/or/absolute/path``, or a scheme another
package registers in the ``loom.stores`` entry-point group (``firestore://project/database``
comes from ``loom_gcp``). Entry points keep the engine free of Google imports. A backend
whose library is not installed raises :class:`~loom.errors.MissingExtraError` naming the
pip extra (``firestore://`` without the ``gcp`` extra) and how to install it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from loom.app import Loom
from loom.errors import ConfigurationError
from loom.extras import install_hint, requires_extra
from loom.store.base import EventStore

DEFAULT_STORE = "sqlite:///.loom/loom.db"
CLOUD_RUN_ENV = "K_SERVICE"  # set by Cloud Run in every service container


def _plugin(group: str, scheme: str, url: str) -> Any:
    for point in entry_points(group=group):
        if point.name == scheme:
            # The entry point is registered even without its extra: name the extra.
            with requires_extra(f"{scheme}://"):
                return point.load()(url)
    raise ConfigurationError(
        f"no backend for {url!r}: scheme {scheme!r} is not built in and no installed package "
        f"registers it in the {group!r} entry-point group (for Google Cloud: "
        f"{install_hint('gcp')})"
    )


def open_store(url: str | None = None) -> EventStore:
    """The event store named by ``url`` (default: ``LOOM_STORE``, then the SQLite default)."""
    url = url or os.environ.get("LOOM_STORE") or DEFAULT_STORE
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigurationError(f"store URL {url!r} has no scheme (e.g. sqlite:///loom.db)")
    if scheme == "memory":
        from loom.store.memory import InMemoryEventStore

        return InMemoryEventStore()
    if scheme == "sqlite":
        from loom.store.sqlite import SqliteEventStore

        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise ConfigurationError(f"store URL {url!r} names no file")
        return SqliteEventStore(Path(path))
    return _plugin("loom.stores", scheme, url)


def open_blob_store(url: str | None = None, *, store_url: str | None = None) -> Any:
    """The blob store named by ``url`` (default ``LOOM_BLOBS``).

    Unset, a SQLite store (``store_url``) keeps its blobs in a ``blobs`` directory beside the
    database, so the CLI and ``loom serve`` share them; any other store gets ``None``.
    """
    from loom import blobs

    url = url or os.environ.get("LOOM_BLOBS")
    if url:
        return blobs.open_blob_store(url)
    store_url = store_url or os.environ.get("LOOM_STORE") or DEFAULT_STORE
    if store_url.startswith("sqlite:///"):
        return blobs.LocalBlobStore(Path(store_url[len("sqlite:///") :]).parent / "blobs")
    return None


def refuse_inprocess_on_cloud_run(env: Mapping[str, str] | None = None) -> None:
    """Refuse the in-process dispatcher inside a Cloud Run service (``K_SERVICE`` is set).

    Its timers are asyncio tasks in this process: Cloud Run throttles the CPU between
    requests and scales idle instances to zero, so they would fire late or never.

    Raises:
        ConfigurationError: Running on Cloud Run.
    """
    env = os.environ if env is None else env
    service = env.get(CLOUD_RUN_ENV)
    if service:
        raise ConfigurationError(
            f"inprocess:// dispatch cannot run on Cloud Run (K_SERVICE={service!r}): its "
            "timers die when the CPU is throttled between requests or the instance scales "
            "to zero; set LOOM_DISPATCH=cloudtasks://projects/P/locations/L/queues/Q"
        )


def load_app(ref: str | None = None) -> Loom:
    """Import ``module:attr`` (default ``LOOM_APP``) and return the :class:`Loom` there."""
    ref = ref or os.environ.get("LOOM_APP")
    if not ref:
        raise ConfigurationError("no app given: pass --app module:attr or set LOOM_APP")
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"app reference {ref!r} must look like module:attr")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import app module {module_name!r}: {exc}") from exc
    if not hasattr(module, attr):
        raise ConfigurationError(
            f"app module {module_name!r} has no attribute {attr!r} (in {ref!r}); "
            f"its Loom app is usually `app`: --app {module_name}:app"
        )
    app = getattr(module, attr)
    if not isinstance(app, Loom):
        raise ConfigurationError(f"{ref!r} is {type(app).__name__}, not a loom.Loom app")
    return app
