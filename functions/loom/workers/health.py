"""Readiness (``GET /health``), liveness (``GET /live``) and the answer to a store failure.

``/health`` says whether this instance can serve now: the app loads and the store answers a
cheap check (:meth:`~loom.store.base.EventStore.ping`) within :data:`HEALTH_TIMEOUT` seconds
(``LOOM_HEALTH_TIMEOUT``). It answers 503 with the reason otherwise, so a load balancer or a
startup probe waits. ``/live`` only says the process answers HTTP: a liveness probe that
checked the store would restart healthy instances during a store outage.

A :class:`~loom.errors.StoreError` that reaches a route is the store's trouble, not the
caller's and not a bug: it answers 503 with ``Retry-After``, and nothing the caller asked for
was half-done (the log keeps only what was durably appended).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

from loom import __version__
from loom.errors import LoomError, StoreError, StoreLimitError, StoreUnavailableError
from loom.runtime import Runtime
from loom.workers.logs import bind
from loom.workers.loop import BackgroundLoop

log = logging.getLogger("loom.worker")

RETRY_AFTER = 2
"""Seconds a caller is told to wait after a store failure."""


def _timeout_from_env() -> float:
    raw = os.environ.get("LOOM_HEALTH_TIMEOUT", "")
    try:
        return max(float(raw), 0.1) if raw else 2.0
    except ValueError:
        return 2.0


HEALTH_TIMEOUT = _timeout_from_env()


def readiness(
    runtime: Callable[[], Runtime], loop: BackgroundLoop, timeout: float | None = None
) -> tuple[int, dict[str, Any]]:
    """``GET /health``: 200 when the app loads and the store answers within ``timeout``."""
    bound = HEALTH_TIMEOUT if timeout is None else timeout
    try:
        store = runtime().store
        # Waited for on this thread, with a bound: even a loop stuck in a blocking call
        # cannot keep the probe from answering.
        loop.submit(store.ping()).result(timeout=bound)
    except concurrent.futures.TimeoutError:
        error = StoreUnavailableError(
            f"the store did not answer within {bound:g} s", details={"reason": "timeout"}
        )
        return 503, _unhealthy(error)
    except LoomError as exc:
        return 503, _unhealthy(exc)
    return 200, {"healthy": True, "version": __version__}


def _unhealthy(exc: LoomError) -> dict[str, Any]:
    log.warning("not ready: %s: %s", exc.code, exc.message)
    return {"healthy": False, "version": __version__, "error": exc.to_json()}


def liveness() -> tuple[int, dict[str, Any]]:
    """``GET /live``: the process answers HTTP. Checks nothing else, on purpose."""
    return 200, {"alive": True, "version": __version__}


def store_error_reply(exc: StoreError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """503 with ``Retry-After`` and the JSON error body, for a store failure.

    The body names the failure (``code``, ``message``, ``details``) plus an ``error_id``
    that is also on the log line carrying the cause's traceback. A write over a store limit
    is no passing failure: 413, without ``Retry-After``, naming the limit.
    """
    if isinstance(exc, StoreLimitError):
        log.warning("refused over a store limit: %s", exc.message)
        return 413, exc.to_json(), {}
    error_id = uuid.uuid4().hex
    bind(error_id=error_id)
    log.error("store failure %s: %s: %s", error_id, exc.code, exc.message, exc_info=exc)
    body = exc.to_json()
    body["details"] = {**body["details"], "error_id": error_id}
    return 503, body, {"Retry-After": str(RETRY_AFTER)}
