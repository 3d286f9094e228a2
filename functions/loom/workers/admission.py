"""Request threads kept for the probes, so ``/live`` and ``/health`` answer whatever the store
does.

functions-framework serves with gunicorn's ``THREADS`` request threads (Cloud Run sends an
instance up to its concurrency at once). Every request that waits on the store holds its
thread: while the store hangs, enough of them hold every thread, and a probe then waits in
gunicorn's queue for a thread to free up (``/live`` took 18 s with Firestore paused, and a
slow liveness probe makes Cloud Run restart healthy instances in the middle of an outage).

So at most ``THREADS - PROBE_RESERVE`` requests other than the probes run at once; one more
is answered at once with 503 ``busy`` and ``Retry-After`` (its thread is free again in
microseconds), and the probes never wait for a thread. Terraform sets ``THREADS`` to the
service's concurrency plus :data:`PROBE_RESERVE`, so Cloud Run's own routing never meets the
bound; it holds when the store hangs, or when more requests arrive than were planned for.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any, Final

PROBE_RESERVE: Final = 2
"""Request threads no request but a probe may take."""
PROBE_PATHS: Final = frozenset({"/health", "/live"})


class Slots:
    """How many requests other than the probes may run at once.

    Args:
        threads: The server's request threads.
        reserve: Of those, how many are kept for the probes (at least one request may run).
    """

    def __init__(self, threads: int, reserve: int = PROBE_RESERVE) -> None:
        self.size = max(1, threads - reserve)
        self._free = threading.BoundedSemaphore(self.size)

    def half(self) -> Slots:
        """Slots for half as many requests (at least one): what long waits may hold, so
        that waiters never take every thread the other requests need."""
        return Slots(max(1, self.size // 2), reserve=0)

    def try_enter(self) -> bool:
        """Take a slot if one is free now (never waits: a waiting request holds a thread)."""
        return self._free.acquire(blocking=False)

    def leave(self) -> None:
        """Give back the slot :meth:`try_enter` took."""
        self._free.release()


def slots_from_env(env: Mapping[str, str] | None = None) -> Slots:
    """The slots of a functions-framework process: ``THREADS`` as gunicorn reads it (default
    four per CPU, functions-framework's own)."""
    env = os.environ if env is None else env
    raw = env.get("THREADS", "")
    threads = int(raw) if raw.isdigit() and int(raw) > 0 else (os.cpu_count() or 1) * 4
    return Slots(threads)


def busy_reply(slots: Slots) -> tuple[int, dict[str, Any], dict[str, str]]:
    """503 ``busy`` with ``Retry-After``: the answer to a request no slot was free for."""
    body = {
        "code": "busy",
        "message": f"all {slots.size} request slots of this instance are taken (the store may "
        "be slow to answer); retry shortly",
        "details": {"slots": slots.size},
    }
    return 503, body, {"Retry-After": "1"}
