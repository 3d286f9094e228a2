"""Workloads: what the clients of the simulated deployment ask of it, and when.

A workload *unit* starts one to four executions of the flows in :mod:`tests.sim.app` and
drives them from outside: resumes of their gates (sometimes twice at once, sometimes before
the gate opens), cancels, messages. Every call is a :class:`~tests.sim.requests.Request`
retried until it is answered for good, as an at-least-once client would. What a unit
promises beyond the generic invariants goes into :class:`Expectations` (e.g. the messages a
mailbox must take, once each).

To add a workload: write ``def _name(self, t)`` here starting its executions at virtual
time ``t`` (through :meth:`Clients.start` and friends), add its name to
:data:`~tests.sim.config.WORKLOADS`, and record anything it promises in ``expect``.

The :class:`Operator` settles what is in doubt the way a careful human would: it reads the
ledger (the payment provider's records) and answers ``performed`` with what the effect
returned, ``failed`` if it raised, ``not_performed`` if it never ran, but only once the
worker that wrote the intent can no longer run it (dead, or its call over); and during the
drain it lets executions parked as poison run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loom.errors import StoreError
from loom.kernel.fold import ExecutionState
from loom.kernel.poison import is_poison_parked
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from tests.sim.requests import Decision, Request, Requests, until_answered
from tests.sim.world import World


@dataclass
class Expectations:
    """What the workloads promise, for the invariants to hold them to.

    Attributes:
        messages: Receiver execution id -> the message ids sent to it (each to be taken once).
        started: Every execution id a client starts (each must exist in the end).
    """

    messages: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    started: list[str] = field(default_factory=list[str])


class Clients:
    """Makes the workload units' calls; see the module docstring."""

    def __init__(self, world: World, requests: Requests) -> None:
        self.world, self.requests = world, requests
        self.rng = world.rng("workload")
        self.expect = Expectations()
        self._n = 0

    def plan(self) -> None:
        """Schedule ``config.units`` units over the first part of the chaos."""
        cfg = self.world.config
        names = [n for n, w in cfg.mix.items() if w > 0]
        weights = [cfg.mix[n] for n in names]
        for _ in range(cfg.units):
            name = self.rng.choices(names, weights)[0]
            t = self.rng.uniform(0.0, cfg.chaos_seconds * 0.6)
            getattr(self, f"_{name}")(t)

    def _eid(self, kind: str) -> str:
        self._n += 1
        return f"{kind}-{self._n}"

    # -- calls ---------------------------------------------------------------------------

    def call(
        self,
        kind: str,
        at: float,
        call: Any,
        copies: int = 1,
        then: Any = None,
        about: str | None = None,
    ) -> Request:
        """Make ``call(runtime)`` at virtual time ``at`` from now, ``copies`` times at once."""
        request = Request(kind, call, until_answered, then, about)
        self.requests.send(request, delay=at, copies=copies)
        return request

    def copies(self) -> int:
        """How many copies of a client's call to send at once (``duplicate_calls``)."""
        n, rate = 1, self.world.config.duplicate_calls
        while n < 3 and rate and self.rng.random() < rate:
            n += 1
        return n

    def start(self, t: float, flow: str, inp: Any, eid: str, then: Any = None, **kw: Any) -> None:
        """Start ``flow`` as ``eid`` at ``t`` (a client that retries with the same id)."""
        self.expect.started.append(eid)
        copies = self.copies()
        start = lambda rt: rt.start(flow, inp, execution_id=eid, **kw)  # noqa: E731
        self.call("start", t, start, copies, then, eid)

    def maybe_cancel(self, eid: str, t: float) -> None:
        """With some chance, cancel ``eid`` at a random time after ``t``."""
        if self.rng.random() < 0.25:
            when = t + self.rng.uniform(0.0, 30.0)
            copies = self.copies()
            cancel = lambda rt: rt.cancel(eid, "sim", by="client")  # noqa: E731
            self.call("cancel", when, cancel, copies, about=eid)

    def resume(self, eid: str, t: float, copies: int | None = None) -> None:
        """Resume ``eid``'s approval gate at ``t`` (``copies`` requests at once)."""
        key = f"{eid}:approve"
        copies = copies or self.copies()
        resume = lambda rt: rt.resume(eid, "approve", key, {"ok": True})  # noqa: E731
        self.call("resume", t, resume, copies, about=eid)

    # -- units ---------------------------------------------------------------------------

    def _order(self, t: float) -> None:
        eid, rng = self._eid("order"), self.rng
        gate = rng.random() < 0.6
        inp: dict[str, Any] = {"gate": gate, "dur": self.world.config.effect_seconds}
        if gate and rng.random() < 0.3:
            inp["gate_timeout"] = rng.uniform(5.0, 40.0)
        self.start(t, "sim.order", inp, eid)
        if gate:
            self.resume(eid, t + rng.uniform(-1.0, 20.0))
        self.maybe_cancel(eid, t)

    def _queued(self, t: float) -> None:
        rng = self.rng
        queue = rng.choice(("q1", "q2", "q3"))
        for _ in range(rng.randint(2, 4)):
            eid = self._eid("queued")
            part = rng.choice(("a", "b", None)) if queue == "q2" else None
            inp = {"q": queue, "p": part, "dur": self.world.config.effect_seconds + 1.0}
            inp["steps"] = rng.randint(1, 3)
            when = t + rng.uniform(0.0, 3.0)
            ref = QueueRef(queue, part, priority=rng.choice((0, 0, 1, 5)))
            self.start(when, "sim.queued", inp, eid, queue=ref)
            self.maybe_cancel(eid, when)

    def _family(self, t: float) -> None:
        eid = self._eid("family")
        self.start(t, "sim.parent", {"dur": self.world.config.effect_seconds}, eid)
        self.maybe_cancel(eid, t)

    def _mailbox(self, t: float) -> None:
        rng, eid = self.rng, self._eid("mailbox")
        outside = [f"{eid}/out{i}" for i in range(rng.randint(1, 3))]
        inside = [f"{eid}/in{i}" for i in range(rng.randint(0, 3))]
        self.expect.messages[eid] = outside + inside
        inp = {"n": len(outside) + len(inside), "k": rng.randint(1, 2), "got": 0}

        def senders() -> None:  # once the receiver exists: no send can find it missing
            for mid in outside:
                when = rng.uniform(0.0, 15.0)
                copies = self.copies()
                send = self._send(eid, mid)
                self.call("send", when, send, copies, about=eid)
            if inside:
                sender_id = self._eid("sender")
                self.start(
                    rng.uniform(0.0, 5.0), "sim.sender", {"to": eid, "ids": inside}, sender_id
                )

        self.start(t, "sim.mailbox", inp, eid, then=senders)

    @staticmethod
    def _send(eid: str, mid: str) -> Any:
        return lambda rt: rt.send(eid, "inbox", {"id": mid}, message_id=mid, by="client")

    def _backoff(self, t: float) -> None:
        rng, eid = self.rng, self._eid("backoff")
        fails = [rng.choice((0, 1, 1, 2, 3)) for _ in range(rng.randint(1, 3))]
        budgets = {"max_attempts": float(rng.randint(2, 6))} if rng.random() < 0.5 else None
        self.start(t, "sim.backoff", {"fails": fails}, eid, budgets=budgets)

    def _sleeper(self, t: float) -> None:
        eid = self._eid("sleeper")
        inp = {"nap": self.rng.uniform(1.0, 25.0), "dur": self.world.config.effect_seconds}
        self.start(t, "sim.sleeper", inp, eid)
        self.maybe_cancel(eid, t)


class Operator:
    """Settles in-doubt steps from the ledger, and retries poison; see the module docstring."""

    def __init__(self, world: World, clients: Clients, observer: Runtime) -> None:
        self.world, self.clients, self.observer = world, clients, observer
        self.asked: set[tuple[str, str, int | None]] = set()
        self.retries: dict[str, int] = {}

    async def look(self, drain: bool) -> None:
        """Settle what is in doubt now; while draining, retry what is parked as poison."""
        for row in await self.world.raw.list("in_doubt", limit=10_000):
            state = await self.observer.load_state(row.execution_id)
            for step_id in list(state.in_doubt):
                self._settle(state, step_id)
        if drain:
            for row in await self.world.raw.list("suspended", limit=10_000):
                state = await self.observer.load_state(row.execution_id)
                if is_poison_parked(state):
                    self._retry(row.execution_id)

    def _settle(self, state: ExecutionState, step_id: str) -> None:
        rec = state.steps.get(step_id) or {}
        episode: int | None = rec.get("episode")
        if (state.execution_id, step_id, episode) in self.asked:
            return
        key, attempt = state.step_key(step_id), int(rec.get("attempt", 1))
        found = self.world.ledger.find(key, attempt)
        if found is None and self._may_still_run(state):
            return  # the writer of the intent may invoke it yet: look again later
        verdict, output, error = "not_performed", None, None
        if found is not None:
            verdict = "performed" if found.error is None else "failed"
            output, error = found.output, found.error
        self.asked.add((state.execution_id, step_id, episode))
        eid = state.execution_id

        async def call(rt: Runtime) -> Any:
            return await rt.verdict(
                eid, step_id, verdict, output=output, error=error, by="sim", episode=episode
            )

        self.clients.call("verdict", 0.0, call, about=eid)

    def _may_still_run(self, state: ExecutionState) -> bool:
        """Whether a worker alive may still be in an execute call of ``state`` that wrote
        the intent (it would invoke the effect after we said it never ran)."""
        eid = state.execution_id
        return any(worker.executing[eid] > 0 for worker in self.world.live_workers())

    def _retry(self, eid: str) -> None:
        def decide(error: BaseException | None) -> Decision:
            return "retry" if isinstance(error, StoreError) else "done"

        if self.retries.get(eid, 0) >= 3:
            return  # parked for good: a reason stands
        self.retries[eid] = self.retries.get(eid, 0) + 1
        request = Request("retry", lambda rt: rt.retry(eid, by="sim"), decide)
        self.clients.requests.send(request)
