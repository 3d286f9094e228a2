"""What the simulator changes around the engine for one run, and puts back after it.

The engine is not changed: these replace, for the length of a run, what one process would
otherwise share between simulated workers that stand for separate machines, and the few
things that read the real clock or real randomness.

* **Claim holders look like other machines'.** ``loom.kernel.claims`` decides whether a claim by
  a holder of *this* machine is live from the process table. Every simulated worker lives
  in this process, so each module that took ``new_holder`` gets one naming the simulated
  worker's own machine instead (``sim-w3:1:17``): a claim is then live by its lease time
  alone, as another machine's is.
* **Per-machine state stays per machine.** ``loom.primitives.queues`` keeps the renewals of the leases
  a process holds in a module dict; one dict per simulated worker here (a dead worker's
  renewal never ends, and another machine would never wait for it).
* **Time and chance are the run's.** The memory store stamps summaries with the virtual
  clock; the engine's module-level ``random`` (backoff jitter, queue retry jitter) is
  seeded from the run's seed, and engine log lines are quiet. (The runner keeps the garbage
  collector off during a run: a collection at a random moment would run the ``finally``
  of some abandoned coroutine then.)

A name the engine no longer has raises :class:`HarnessOutdatedError`, saying what to
update here, rather than letting the run silently share state between workers.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import loom.kernel.claims
import loom.primitives.queues
import loom.store.memory
from tests.sim.loop import OWNER


class HarnessOutdatedError(RuntimeError):
    """The engine changed a name the simulator patches: update ``tests/sim/patches.py``."""


class PerOwner(MutableMapping[Any, Any]):
    """A dict per simulated worker (the current one is :data:`~tests.sim.loop.OWNER`)."""

    def __init__(self) -> None:
        self._maps: dict[str | None, dict[Any, Any]] = {}

    def _map(self) -> dict[Any, Any]:
        return self._maps.setdefault(OWNER.get(), {})

    def __getitem__(self, key: Any) -> Any:
        return self._map()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._map()[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._map()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())


@contextmanager
def engine_patched(seed: int, clock: Callable[[], float], new_holder: Callable[[], str]):
    """Apply the module docstring's changes for one run of ``seed``."""
    saved: list[tuple[object, str, object]] = []

    def patch(target: object, name: str, value: object) -> None:
        if not hasattr(target, name):
            raise HarnessOutdatedError(f"{target!r} has no {name!r} any more")
        saved.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    original = loom.kernel.claims.new_holder
    takers = [
        m
        for name, m in sorted(sys.modules.items())
        if name.startswith("loom") and getattr(m, "new_holder", None) is original
    ]
    if not takers:
        raise HarnessOutdatedError("no loom module calls loom.kernel.claims.new_holder any more")
    for module in takers:
        patch(module, "new_holder", new_holder)
    patch(loom.primitives.queues, "_GRANTS", PerOwner())
    patch(loom.store.memory, "time", SimpleNamespace(time=clock))
    state = random.getstate()
    random.seed(f"loom-sim-engine:{seed}")
    engine_log = logging.getLogger("loom")
    level = engine_log.level
    engine_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for target, name, value in reversed(saved):
            setattr(target, name, value)
        random.setstate(state)
        engine_log.setLevel(level)
