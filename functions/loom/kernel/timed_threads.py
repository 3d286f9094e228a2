"""Sync effects with a timeout run on a thread of their own that nobody waits for.

A thread cannot be stopped. With ``asyncio.to_thread`` a sync effect that blocks past its
timeout keeps a thread of the loop's shared pool, and the process waits for it: the CLI
printed its answer and then did not exit until the effect returned (never, for a call
that hangs), and a served worker with a few hung calls had no pool thread left, so every
later sync effect timed out in the queue without having run. A daemon thread per call
leaves the pool alone and does not hold the process at exit; the flow moved on at the
timeout as before, and the effect sees ``ctx.cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def in_daemon_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Run ``fn(*args)`` in a new daemon thread (in a copy of the caller's context)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(exc: BaseException | None, result: Any = None) -> None:
        def land() -> None:
            if done.done():  # (the awaiting task gave up at the timeout)
                return
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(result)

        with contextlib.suppress(RuntimeError):  # the loop closed while the call hung
            loop.call_soon_threadsafe(land)

    def run() -> None:
        try:
            result = context.run(fn, *args)
        except BaseException as exc:  # (handed to the awaiting task, as to_thread does)
            settle(exc)
        else:
            settle(None, result)

    threading.Thread(target=run, name="loom-timed-effect", daemon=True).start()
    return done
