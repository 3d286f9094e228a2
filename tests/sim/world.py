"""The simulated world of one run: its clock, its workers, the shared store, what went wrong.

A :class:`World` holds everything one seed's run touches, so nothing leaks into the next:

* the :class:`~tests.sim.loop.SimLoop` and the run's random streams (:meth:`World.rng`:
  one per purpose, all derived from its seed, so changing how one part draws leaves the
  others' draws alone);
* the wall clock the runtimes read (:meth:`World.clock`): the loop's virtual time plus the
  jumps the chaos makes;
* the shared :class:`~loom.store.memory.InMemoryEventStore` (``raw``), the
  :class:`~tests.sim.store.Faults` between it and the workers, and the
  :class:`~tests.sim.ledger.Ledger` of effect invocations;
* the workers: each a :class:`~loom.runtime.Runtime` of its own over its own
  :class:`~tests.sim.store.SimStore`, running in contexts owned by its name (see
  :data:`~tests.sim.loop.OWNER`). A worker killed is replaced after a while by a new one with
  a new name (a new machine); the requests it was serving are made again elsewhere
  (:mod:`tests.sim.requests`);
* the violations found while running (the rest are found at the end by
  :mod:`tests.sim.invariants`).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loom.app import Loom
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from tests.sim.config import SimConfig
from tests.sim.ledger import Ledger
from tests.sim.loop import OWNER, SimLoop, neutral_context
from tests.sim.store import Faults, SimStore

if TYPE_CHECKING:
    from tests.sim.requests import Requests

EPOCH = 1_750_000_000.0  # what the wall clock reads when a run starts


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its name, the execution it concerns, and what was seen."""

    invariant: str
    execution_id: str | None
    detail: str

    def line(self) -> str:
        """One line for a report."""
        return f"[{self.invariant}] {self.execution_id or '-'}: {self.detail}"


@dataclass
class Worker:
    """A simulated machine: a runtime, and the execute calls it has under way."""

    name: str
    runtime: Runtime
    executing: Counter[str] = field(default_factory=Counter[str])  # execution id -> calls


class World:
    """Everything one run touches; see the module docstring."""

    def __init__(self, seed: int, config: SimConfig, app: Loom) -> None:
        self.seed, self.config, self.app = seed, config, app
        self.loop = SimLoop(self.rng("schedule"))
        self.loop.before_callback = self._dies_now
        self.loop.on_death = self._died
        self._kills = self.rng("kills")
        self.chaos = False
        self.offset = 0.0  # clock jumps so far
        self.raw = InMemoryEventStore()
        self.faults = Faults(self)
        self.ledger = Ledger(self)
        self.violations: list[Violation] = []
        self.stats: Counter[str] = Counter()
        self.workers: dict[str, Worker] = {}
        self.holders: dict[str, str] = {}  # claim holder -> worker that made it
        self._names = itertools.count(1)
        self._holder_numbers = itertools.count(1)
        self.requests: Requests | None = None  # set by the runner
        self.trace: list[tuple[float, str | None, str]] = []  # (time, worker, what happened)

    def note(self, what: str) -> None:
        """Add a line to the run's trace (``--show`` prints the lines naming an execution)."""
        self.trace.append((self.loop.time(), OWNER.get(), what))

    def rng(self, purpose: str) -> random.Random:
        """The run's random stream for ``purpose``."""
        return random.Random(f"loom-sim:{self.seed}:{purpose}")

    def clock(self) -> float:
        """The wall clock every runtime reads: virtual time plus the jumps so far."""
        return EPOCH + self.loop.time() + self.offset

    def violation(self, invariant: str, execution_id: str | None, detail: str) -> None:
        """Record a broken invariant (not once the run is over: its teardown unwinds the
        tasks left suspended, which is no behaviour of the engine)."""
        assert invariant in _names(), f"add {invariant!r} to tests.sim.invariants.INVARIANTS"
        if not self.loop.tearing_down:
            self.violations.append(Violation(invariant, execution_id, detail))

    # -- workers -------------------------------------------------------------------------

    def spawn(self, name: str | None = None) -> Worker:
        """Start a new worker (a new machine) and return it."""
        from tests.sim.requests import SimDispatcher  # (it builds on this module)

        name = name or f"w{next(self._names)}"
        store = SimStore(self, self.raw, name)
        runtime = Runtime(
            self.app,
            store,
            dispatcher=SimDispatcher(self),
            clock=self.clock,
            claim_ttl=self.config.claim_ttl,
            max_inline_backoff=self.config.max_inline_backoff,
        )
        worker = self.workers[name] = Worker(name, runtime)
        self.stats["workers"] += 1
        return worker

    def live_workers(self) -> list[Worker]:
        """The workers alive now, in the order they were started."""
        return [w for w in self.workers.values() if self.loop.alive(w.name)]

    def new_holder(self) -> str:
        """A claim holder naming the current worker's own machine (``tests.sim.patches``)."""
        owner = OWNER.get() or "world"
        holder = f"sim-{owner}:1:{next(self._holder_numbers)}"
        self.holders[holder] = owner
        return holder

    def _dies_now(self, owner: str) -> bool:
        rate = self.config.kill_rate
        return self.chaos and rate > 0 and owner in self.workers and self._kills.random() < rate

    def kill(self, name: str) -> None:
        """Kill worker ``name`` now (SIGKILL: its tasks stay where they are, forever)."""
        self.loop.kill(name)

    def _died(self, name: str) -> None:
        self.stats["kills"] += 1
        if self.requests is not None:
            self.requests.lost_with(name)
        self.loop.call_later(
            self.config.restart_delay, self.spawn, context=neutral_context()
        )  # its replacement

    def jump_clock(self, seconds: float) -> None:
        """The wall clock jumps by ``seconds`` (NTP stepping it, a VM resumed)."""
        self.offset += seconds
        self.stats["clock_jumps"] += 1


def _names() -> dict[str, str]:
    from tests.sim.invariants import INVARIANTS  # (it builds on this module)

    return INVARIANTS
