"""The simulator's event loop: virtual time, a seeded scheduler, and owners that die.

``SimLoop`` is an ``asyncio`` event loop that never waits for anything real:

* **Virtual time.** :meth:`SimLoop.time` is a number the loop moves itself. When no callback
  is ready, it jumps to the earliest timer instead of sleeping, so ``asyncio.sleep(30)`` costs
  no wall time and a run of hours of virtual time takes milliseconds. There is no selector
  and no I/O: everything the simulated world does is a callback or a timer.
* **A seeded scheduler.** Before each iteration the callbacks that are ready are shuffled
  with the loop's own ``random.Random``, so which task runs first among those that could is
  explored, and is the same again for the same seed.
* **Owners that die.** Every callback runs in a ``contextvars.Context``; :data:`OWNER` in that
  context names the simulated worker it belongs to (tasks inherit it from whoever created
  them). :meth:`SimLoop.kill` marks an owner dead: from then on its callbacks are kept and
  never run, so its tasks stay suspended at whatever await they had reached, exactly as a
  SIGKILLed process's would. Nothing is cancelled (a cancel would run ``finally`` blocks a
  real kill never runs). ``before_callback`` lets the world kill an owner just before one of
  its callbacks runs: a crash at an await.

A run ends when the main coroutine is done. If nothing is ready and no timer is left before
that, :class:`Stuck` is raised (a deadlock of the simulated world, a harness bug); a run
that exceeds its callback budget raises it too (a livelock).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import random
from collections.abc import Callable
from typing import Any

OWNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_owner", default=None)
"""The simulated worker a callback belongs to (``None``: the world itself, never killed)."""


class Stuck(RuntimeError):
    """The simulated world can make no progress (deadlock), or would never stop (livelock)."""


class SimLoop(asyncio.BaseEventLoop):
    """A deterministic event loop; see the module docstring.

    Args:
        rng: Decides the order of ready callbacks.
        max_callbacks: Callbacks a run may execute before it counts as a livelock.
    """

    def __init__(self, rng: random.Random, max_callbacks: int = 5_000_000) -> None:
        super().__init__()
        self._now = 0.0
        self.rng = rng
        self.max_callbacks = max_callbacks
        self.callbacks = 0
        self.dead: dict[str, float] = {}  # owner -> virtual time of death
        self.frozen: list[asyncio.Handle] = []  # what the dead would have run next
        self.before_callback: Callable[[str], bool] | None = None  # True: kill it now
        self.on_death: Callable[[str], None] | None = None  # told of each death, once
        self.errors: list[str] = []  # what asyncio reported (unretrieved errors, …)
        self.tearing_down = False
        self.set_exception_handler(_record_error)

    # -- what asyncio asks of a loop -----------------------------------------------------

    def time(self) -> float:
        """Virtual seconds since the loop was made."""
        return self._now

    def _process_events(self, event_list: Any) -> None:
        """No selector: there are no events to process."""

    def _write_to_self(self) -> None:
        """No other thread ever wakes this loop."""

    def _run_once(self) -> None:
        if not self._ready:
            self._advance()
        self._collect_due_timers()
        batch = list(self._ready)
        self._ready.clear()
        if len(batch) > 1:
            self.rng.shuffle(batch)
        for handle in batch:
            if handle._cancelled:  # pyright: ignore[reportPrivateUsage]
                continue
            owner = _owner(handle)
            if owner is not None and (owner in self.dead or self._dies(owner)):
                self.frozen.append(handle)  # never run: the owner is gone
                continue
            self.callbacks += 1
            handle._run()  # pyright: ignore[reportPrivateUsage]
        if self.callbacks > self.max_callbacks:
            raise Stuck(f"more than {self.max_callbacks} callbacks: the run never settles")

    def _advance(self) -> None:
        """Move virtual time to the earliest live timer (nothing else can happen first)."""
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:  # pyright: ignore[reportPrivateUsage]
            heapq.heappop(scheduled)._scheduled = False  # pyright: ignore[reportPrivateUsage]
        if scheduled:
            self._now = max(self._now, scheduled[0].when())
        elif not self._stopping:  # pyright: ignore[reportAttributeAccessIssue]
            raise Stuck("nothing is ready and no timer is set, but the run is not over")

    def _collect_due_timers(self) -> None:
        scheduled = self._scheduled
        while scheduled and scheduled[0].when() <= self._now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False  # pyright: ignore[reportPrivateUsage]
            if not handle._cancelled:  # pyright: ignore[reportPrivateUsage]
                self._ready.append(handle)

    # -- deaths --------------------------------------------------------------------------

    def _dies(self, owner: str) -> bool:
        if self.before_callback is None or not self.before_callback(owner):
            return False
        self.kill(owner)
        return True

    def kill(self, owner: str) -> None:
        """``owner`` dies now: none of its callbacks runs again (its tasks stay suspended)."""
        if owner in self.dead:
            return
        self.dead[owner] = self._now
        if self.on_death is not None:
            self.on_death(owner)

    def alive(self, owner: str) -> bool:
        """Whether ``owner`` has not been killed."""
        return owner not in self.dead


def _owner(handle: asyncio.Handle) -> str | None:
    context: contextvars.Context | None = handle._context  # pyright: ignore[reportAttributeAccessIssue,reportUnknownMemberType]
    return None if context is None else context.get(OWNER)


def _record_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Keep what asyncio would log (an error nobody retrieved, a callback that raised) for
    the report, unless the run is being torn down (the dead's tasks are dropped then)."""
    assert isinstance(loop, SimLoop)
    if loop.tearing_down:
        return
    exc = context.get("exception")
    loop.errors.append(f"{context.get('message')}: {exc!r}" if exc else str(context.get("message")))


def neutral_context() -> contextvars.Context:
    """An empty context: what runs in it belongs to no worker (the world's own timers)."""
    return contextvars.Context()


def owned_context(owner: str) -> contextvars.Context:
    """A fresh context whose callbacks belong to ``owner``."""
    context = contextvars.Context()
    context.run(OWNER.set, owner)
    return context
