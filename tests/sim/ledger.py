"""The ledger of real effect invocations: what the outside world saw, whatever the log says.

Every effect of the simulated app is :meth:`Ledger.invoke`: it writes an
:class:`Invocation` (idempotency key, attempt, worker, output or error) *as it starts* — the
side effect happens at once, like a card charged the moment the request reaches the bank —
then takes some virtual time, then returns or raises. A worker killed during that time
leaves an invocation whose outcome the log never learns: the in-doubt case.

What the invariants read here (``tests.sim.invariants``) is checked against the final logs
after the run. Two things are checked while it runs, because afterwards they cannot be told:

* ``effects.intent``: a non-idempotent invocation finds the intent record of its attempt
  (``EffectStarted``, or the ``EffectRetried`` of an inline retry) already in the log. (A
  holder whose claim lapsed while it was on its way may still invoke after another worker
  parked the step in doubt: the operator waits for that holder's call to end.)
* ``queues.concurrency``: the executions of a queue with an invocation in flight (by a worker
  still alive) never outnumber the queue's concurrency, and never two of one partition key.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loom.kernel.context import EffectContext
from tests.sim.loop import OWNER

if TYPE_CHECKING:
    from tests.sim.world import World


class SimEffectError(Exception):
    """What a simulated effect raises when its invocation fails (retried per its policy)."""


@dataclass(frozen=True)
class Invocation:
    """One real invocation of an effect.

    Attributes:
        n: Its place in the order of all invocations.
        key: The idempotency key it was given.
        execution_id: Whose step it was.
        step_id: The step.
        attempt: The attempt number the engine gave it.
        effect: The effect's name.
        idempotent: Whether the effect is declared idempotent.
        worker: The worker that invoked it.
        at: Virtual time it started.
        output: What it returns (``None`` when it fails).
        error: Why it fails, if it does.
    """

    n: int
    key: str
    execution_id: str
    step_id: str
    attempt: int
    effect: str
    idempotent: bool
    worker: str | None
    at: float
    output: Any
    error: str | None


class Ledger:
    """Records invocations and watches queue concurrency; see the module docstring."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = world.rng("effects")
        self.invocations: list[Invocation] = []
        self.by_key: dict[str, list[Invocation]] = defaultdict(list)
        # queue -> (execution id, worker) -> invocations in flight
        self.inflight: dict[str, dict[tuple[str, str | None], int]] = defaultdict(dict)
        self.partitions: dict[str, str | None] = {}
        self.on_invoke: Callable[[Invocation], None] | None = None  # (a scenario's hook)

    async def invoke(self, ctx: EffectContext, spec: dict[str, Any], idempotent: bool) -> Any:
        """The body of every simulated effect (see the module docstring).

        ``spec`` may say ``fail`` (chance of failing), ``fail_until`` (attempts before this
        one fail), ``dur`` (longest duration) or ``secs`` (the exact duration), ``q``/``p``
        (the queue and partition key the execution runs on) and ``echo`` (returned as the
        output).
        """
        inv = self._record(ctx, spec, idempotent)
        if not idempotent:
            await self._check_intent(ctx)
        queue = spec.get("q")
        if queue is not None:
            self._enter(queue, spec.get("p"), ctx.execution_id, inv.worker)
        try:
            secs = spec.get("secs")
            await asyncio.sleep(
                secs if secs is not None else self.rng.uniform(0, spec.get("dur", 0.5))
            )
        finally:
            self.world.note(f"returned {inv.execution_id} {inv.key} attempt {inv.attempt}")
            if queue is not None:
                self._leave(queue, ctx.execution_id, inv.worker)
        if inv.error is not None:
            raise SimEffectError(inv.error)
        return inv.output

    def _record(self, ctx: EffectContext, spec: dict[str, Any], idempotent: bool) -> Invocation:
        until = spec.get("fail_until")
        failing = (
            ctx.attempt < until if until is not None else self.rng.random() < spec.get("fail", 0.0)
        )
        echo = spec.get("echo")
        output = echo if echo is not None else f"{ctx.idempotency_key}@{ctx.attempt}"
        inv = Invocation(
            n=len(self.invocations),
            key=ctx.idempotency_key,
            execution_id=ctx.execution_id,
            step_id=ctx.step_id,
            attempt=ctx.attempt,
            effect=ctx.effect,
            idempotent=idempotent,
            worker=OWNER.get(),
            at=self.world.loop.time(),
            output=None if failing else output,
            error=f"attempt {ctx.attempt} failed" if failing else None,
        )
        self.invocations.append(inv)
        self.by_key[inv.key].append(inv)
        self.world.note(f"invoke {inv.execution_id} {inv.key} attempt {inv.attempt}")
        if self.on_invoke is not None:
            self.on_invoke(inv)
        return inv

    async def _check_intent(self, ctx: EffectContext) -> None:
        events = await self.world.raw.read(ctx.execution_id)  # (never suspends: no yield)
        cut = max((e.seq for e in events if e.type == "ExecutionContinued"), default=0)
        for event in events:
            if (
                event.seq > cut
                and event.type in ("EffectStarted", "EffectRetried")
                and event.step_id == ctx.step_id  # type: ignore[union-attr]
                and event.attempt == ctx.attempt  # type: ignore[union-attr]
            ):
                return
        self.world.violation(
            "effects.intent",
            ctx.execution_id,
            f"{ctx.effect} invoked as {ctx.idempotency_key} attempt {ctx.attempt} before any "
            "intent record of that attempt was in the log",
        )

    def _enter(self, queue: str, partition: str | None, eid: str, worker: str | None) -> None:
        flight = self.inflight[queue]
        flight[(eid, worker)] = flight.get((eid, worker), 0) + 1
        self.partitions[eid] = partition
        loop = self.world.loop
        running = sorted({e for (e, w), n in flight.items() if n and (w is None or loop.alive(w))})
        limit = self.world.app.queues[queue].concurrency
        if limit is not None and len(running) > limit:
            self.world.violation(
                "queues.concurrency",
                eid,
                f"{len(running)} executions of queue {queue!r} in flight at once (limit "
                f"{limit}): {', '.join(running)}",
            )
        self._per_worker(queue, eid, flight)
        keys = [self.partitions[e] for e in running if self.partitions[e] is not None]
        if len(keys) != len(set(keys)):
            self.world.violation(
                "queues.partition",
                eid,
                f"two executions of one partition key of {queue!r} in flight: {running}",
            )

    def _per_worker(self, queue: str, eid: str, flight: dict[tuple[str, str | None], int]) -> None:
        """A worker (alive) never runs more of ``queue`` than its ``worker_concurrency``."""
        limit = self.world.app.queues[queue].worker_concurrency
        loop = self.world.loop
        if limit is None:
            return
        by_worker: dict[str, set[str]] = {}
        for (e, w), n in flight.items():
            if n and w is not None and loop.alive(w):
                by_worker.setdefault(w, set()).add(e)
        for worker, running in by_worker.items():
            if len(running) > limit:
                self.world.violation(
                    "queues.worker_concurrency",
                    eid,
                    f"worker {worker} runs {len(running)} executions of {queue!r} at once "
                    f"(worker_concurrency {limit}): {', '.join(sorted(running))}",
                )

    def _leave(self, queue: str, eid: str, worker: str | None) -> None:
        flight = self.inflight[queue]
        flight[(eid, worker)] -= 1
        if not flight[(eid, worker)]:
            del flight[(eid, worker)]

    def find(self, key: str, attempt: int) -> Invocation | None:
        """The first invocation of ``key`` at ``attempt``, if there was one."""
        return next((i for i in self.by_key.get(key, ()) if i.attempt == attempt), None)
