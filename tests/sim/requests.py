"""Requests to workers: deliveries of execute calls, and control calls from clients.

Everything a worker does starts as a :class:`Request` made to it, the way a Cloud Tasks
task or an HTTP call reaches a Cloud Run instance:

* an **execute delivery** (what a runtime's :class:`SimDispatcher` is asked to dispatch,
  or what a sweep redispatches): at least once, and with ``duplicate_rate`` two or three
  times at once to different workers; retried after a store error (HTTP 503), dropped
  after ``superseded`` (409: another holder owns it);
* a **control call** of a client (start, resume, cancel, send, verdict, retry): retried
  until it is answered for good, sometimes sent twice at once (a client retrying on a
  timeout while its first request is still under way).

A request runs as a task owned by the worker it went to. If that worker dies, the request
is lost with it, and made again (to another worker) ``redelivery_delay`` later: the HTTP
call failed. :attr:`Requests.pending` counts the copies not yet answered, and
:attr:`Requests.idle` is set while there are none, so the runner knows when the world is
quiet.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from loom.dispatch.base import Dispatcher
from loom.errors import (
    ExecutionSupersededError,
    LoomError,
    StoreError,
    UnknownExecutionError,
)
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.sim.loop import neutral_context, owned_context
from tests.sim.world import Worker, World

Decision = Literal["done", "retry"]


def until_answered(error: BaseException | None) -> Decision:
    """A client's call: retried over store errors, supersession, and an execution not
    there yet (a resume sent before the start landed); anything else is an answer."""
    if isinstance(error, (StoreError, ExecutionSupersededError, UnknownExecutionError)):
        return "retry"
    return "done"


def execute_decision(error: BaseException | None) -> Decision:
    """A delivery's answer: redelivered after a store error only (a 503), dropped after a
    ``superseded`` 409 (its holder owns the execution) or any other answer."""
    return "retry" if isinstance(error, StoreError) else "done"


@dataclass(eq=False)
class Request:
    """A call to make on some worker until it is answered for good.

    Attributes:
        kind: What it is (``execute``, ``resume``, …), for the statistics.
        call: What the worker does.
        decide: What an answer means: ``None`` for success, else the error raised; returns
            ``"done"`` or ``"retry"`` (default :func:`until_answered`).
        then: Called once, after the first answer that is ``done``.
        about: The execution it concerns, if one (for a scenario's routing).
        tries: Attempts made so far.
        answered: Whether an answer was ``done`` (copies may still answer after it).
    """

    kind: str
    call: Callable[[Runtime], Awaitable[Any]]
    decide: Callable[[BaseException | None], Decision] = until_answered
    then: Callable[[], None] | None = None
    about: str | None = None
    tries: int = 0
    answered: bool = False


class Requests:
    """Makes requests to live workers; see the module docstring."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = world.rng("requests")
        self.pending = 0  # copies scheduled or running
        self.idle = asyncio.Event()  # set while ``pending`` is 0
        self.idle.set()
        self._running: dict[str, dict[int, Request]] = {}  # worker -> copies it serves
        self._ids = 0
        self.route: Callable[[Request], str | None] | None = None  # a scenario picks workers
        world.requests = self

    def send(self, request: Request, delay: float = 0.0, copies: int = 1) -> None:
        """Make ``request`` after ``delay`` seconds, ``copies`` times at once."""
        loop = self.world.loop
        for i in range(copies):
            self._count(+1)
            jitter = self.rng.uniform(0.0, 0.05) if i else 0.0
            loop.call_later(
                max(0.0, delay) + jitter, self._start, request, context=neutral_context()
            )

    def _count(self, change: int) -> None:
        self.pending += change
        if self.pending:
            self.idle.clear()
        else:
            self.idle.set()

    def copies(self) -> int:
        """How many copies of a new delivery to make (``duplicate_rate``, chaos only)."""
        world, n = self.world, 1
        while n < 3 and world.chaos and self.rng.random() < world.config.duplicate_rate:
            n += 1
        return n

    def _start(self, request: Request) -> None:
        live = self.world.live_workers()
        if not live:  # every worker is restarting: try again shortly
            self._count(-1)
            self.send(request, delay=1.0)
            return
        chosen = self.route(request) if self.route is not None else None
        worker = self.world.workers[chosen] if chosen is not None else self.rng.choice(live)
        self._ids += 1
        self._running.setdefault(worker.name, {})[self._ids] = request
        coro = self._serve(worker, request, self._ids)
        self.world.loop.create_task(coro, context=owned_context(worker.name))

    async def _serve(self, worker: Worker, request: Request, rid: int) -> None:
        request.tries += 1
        self.world.stats[f"{request.kind}.sent"] += 1
        error: BaseException | None = None
        try:
            await request.call(worker.runtime)
        except LoomError as exc:
            error = exc
        except Exception as exc:  # the engine raised what no caller is told to expect
            error = exc
            where = "".join(traceback.format_exception(exc)[-3:]).strip()
            self.world.violation("engine.error", None, f"{request.kind}: {exc!r}\n{where}")
        finally:
            self._running[worker.name].pop(rid, None)
            self._count(-1)
        self._answered(request, error)

    def _answered(self, request: Request, error: BaseException | None) -> None:
        stats = self.world.stats
        stats[f"{request.kind}.{type(error).__name__ if error else 'ok'}"] += 1
        if request.decide(error) == "retry":
            self.send(request, delay=self.rng.uniform(0.5, 3.0))
        elif not request.answered:
            request.answered = True
            if request.then is not None:
                request.then()

    def lost_with(self, worker: str) -> None:
        """Worker ``worker`` died: what it was serving is made again elsewhere."""
        for request in self._running.pop(worker, {}).values():
            self._count(-1)
            self.world.stats[f"{request.kind}.lost"] += 1
            self.send(request, delay=self.world.config.redelivery_delay)

    def stuck(self) -> list[str]:
        """Requests still under way on live workers (for the end of a run: a hang)."""
        loop = self.world.loop
        return [
            f"{r.kind} on {w}"
            for w, running in sorted(self._running.items())
            if loop.alive(w)
            for r in running.values()
        ]


class SimDispatcher(Dispatcher):
    """A runtime's dispatcher: each dispatch becomes execute deliveries to some workers."""

    inline = False

    def __init__(self, world: World) -> None:
        self.world = world

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        world = self.world
        assert world.requests is not None
        delay = 0.0 if not_before is None else not_before - world.clock()
        # Delivered more than once at once, as at-least-once queues do; a timer's dispatch
        # once (a copy of each queue retry would breed copies of itself without end).
        copies = world.requests.copies() if not_before is None else 1
        world.requests.send(delivery(package), delay=delay + 0.001, copies=copies)
        await asyncio.sleep(0)  # (enqueueing a task is a round trip too)


def delivery(package: ExecutionPackage) -> Request:
    """The request that delivers ``package`` to a worker's ``execute``."""
    call = lambda rt: _execute(rt, package)  # noqa: E731
    return Request("execute", call, execute_decision, about=package.execution_id)


async def _execute(runtime: Runtime, package: ExecutionPackage) -> Any:
    """One execute call, counted as under way on its worker while it runs."""
    from tests.sim.loop import OWNER

    world: World = runtime.dispatcher.world  # type: ignore[union-attr]
    worker = world.workers[OWNER.get() or ""]
    eid = package.execution_id
    worker.executing[eid] += 1
    world.note(f"execute {eid} begins")
    try:
        result = await runtime.execute(package)
        world.note(f"execute {eid} ends {result.status}")
        return result
    except BaseException as exc:
        world.note(f"execute {eid} raises {type(exc).__name__}")
        raise
    finally:
        worker.executing[eid] -= 1
