"""One event loop per process, on a background thread, for request threads to run on.

A WSGI server (functions-framework's gunicorn, ``loom serve``) calls handlers on many
threads, while stores and clients built on asyncio (the Firestore ``AsyncClient``, any
``grpc.aio`` channel) stay bound to the first loop that used them: a fresh
``asyncio.run`` per request breaks them from the second request on ("Event loop is
closed"). :class:`BackgroundLoop` gives every request the same long-lived loop instead.

Sync effects run in the loop's default executor, sized to the server's request threads
(:func:`effect_threads`). The loop starts on first use, not at import: a server that forks
workers after importing the app (gunicorn) must not fork a running thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """An event loop on a daemon thread; :meth:`run` waits for a coroutine on it."""

    def __init__(self, name: str = "loom-loop") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # After a fork the thread is gone even though the loop object was copied.
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                started = threading.Event()
                loop.set_default_executor(
                    concurrent.futures.ThreadPoolExecutor(
                        effect_threads(), thread_name_prefix=f"{self._name}-effect"
                    )
                )

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                threading.Thread(target=serve, name=self._name, daemon=True).start()
                started.wait()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop, in a copy of the caller's context; return its future.

        Raises:
            RuntimeError: Called from the loop's own thread (waiting would deadlock).
        """
        loop = self._ensure()
        if _running_loop() is loop:
            coro.close()
            raise RuntimeError("BackgroundLoop called from its own loop; await instead")
        context = contextvars.copy_context()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            task = loop.create_task(coro, context=context)
            task.add_done_callback(lambda t: _settle(t, done))

        loop.call_soon_threadsafe(start)
        return done

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception).

        The coroutine runs in a copy of the caller's context, so log fields bound by the
        request (trace, execution id) reach the lines it logs, and fields it binds reach
        the request's access line.
        """
        return self.submit(coro).result()

    def owns_current(self) -> bool:
        """Whether the caller runs on this loop."""
        return self._loop is not None and _running_loop() is self._loop


def effect_threads(env: Mapping[str, str] | None = None) -> int:
    """Threads the loop lends to sync effects (``asyncio.to_thread``).

    Every request the server runs at once (``THREADS``, gunicorn's request threads) may be
    in a sync effect; asyncio's default of ``min(32, cores + 4)`` would queue all but a few
    of them (80 requests on one core: 16 rounds). Threads start only when needed.
    """
    raw = (os.environ if env is None else env).get("THREADS", "")
    default = min(32, (os.cpu_count() or 1) + 4)
    return max(default, int(raw)) if raw.isdigit() else default


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(task: asyncio.Task[T], done: concurrent.futures.Future[T]) -> None:
    if task.cancelled():
        done.cancel()
        return
    exc = task.exception()
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(task.result())


PROCESS_LOOP = BackgroundLoop()
"""The loop the ``tasks`` and ``events`` targets share in a process."""
