"""What one simulated run is made of: workers, workload size, and how hostile the world is.

Every seed draws its own configuration (:meth:`SimConfig.sample`), in the manner of swarm
testing: some seeds kill workers often, some never; some lose commit answers, some stall the
store; so a fault that masks another in one mix is absent from the next. A scenario test
builds a :class:`SimConfig` by hand instead (usually :meth:`SimConfig.calm`, then changes).

Bounds that keep the checks meaningful (a fault outside them would break a lease by design,
not by a bug): queue lease calls never stall or fail, so a live holder renews its lease in
time (a third of its 15 s), and clock jumps stay under a few seconds. Store stalls are left
long enough (up to 4.5 s, with claims of 10 s renewed at half-life) that a live holder's
claim can lapse while it waits: the takeover that follows is a race the engine must handle.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

WORKLOADS = ("order", "queued", "family", "mailbox", "backoff", "sleeper")


@dataclass(frozen=True)
class SimConfig:
    """One run's world. Rates are probabilities per event; times are virtual seconds.

    Attributes:
        workers: Workers alive at once (a dead one is replaced after ``restart_delay``).
        units: Workload units started (each is one to four executions).
        mix: Relative weights of the workloads (:data:`WORKLOADS`).
        chaos_seconds: How long faults are injected before the world calms down and drains.
        duplicate_rate: Chance that a delivery is made again at once, to another worker
            (and again, for a third copy).
        duplicate_calls: Chance that a client sends a call twice at once (a retry on a
            timeout while the first request is still under way).
        kill_rate: Chance, per callback a worker runs during the chaos, that it dies there.
        restart_delay: Seconds before a dead worker's replacement takes work.
        redelivery_delay: Seconds before a delivery lost with its worker is made again.
        unavailable_rate: Chance a store call fails before it applies (nothing written).
        lost_answer_rate: Chance a store write applies and its answer is lost (an error).
        latency: Mean seconds of a store call's answer (exponential).
        instant_rate: Chance a store call answers in the same loop turn as it is made.
        stall_rate: Chance a store call stalls (a long pause before its answer).
        stall_seconds: How long a stall lasts, at most.
        jump_rate: Chance per second of chaos that the wall clock jumps.
        max_jump: Largest clock jump, seconds (forward or back).
        client_task_rate: Chance a store call starts a task of its own, as a store client or
            a telemetry exporter might, in whatever task scope it was called from.
        claim_ttl: The runtimes' claim lifetime.
        max_inline_backoff: The runtimes' longest inline retry wait.
        effect_seconds: Longest an effect invocation takes.
        operator_delay: Seconds the operator takes to look at something in doubt.
    """

    workers: int = 3
    units: int = 8
    mix: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WORKLOADS, 1.0))
    chaos_seconds: float = 40.0
    duplicate_rate: float = 0.0
    duplicate_calls: float = 0.0
    kill_rate: float = 0.0
    restart_delay: float = 2.0
    redelivery_delay: float = 6.0
    unavailable_rate: float = 0.0
    lost_answer_rate: float = 0.0
    latency: float = 0.01
    instant_rate: float = 0.3
    stall_rate: float = 0.0
    stall_seconds: float = 4.0
    jump_rate: float = 0.0
    max_jump: float = 2.0
    client_task_rate: float = 0.0
    claim_ttl: float = 10.0
    max_inline_backoff: float = 10.0
    effect_seconds: float = 2.0
    operator_delay: float = 5.0

    @classmethod
    def calm(cls, **changes: Any) -> SimConfig:
        """No faults at all (a scenario adds exactly the ones it needs)."""
        return replace(cls(), **changes)

    @classmethod
    def sample(cls, seed: int) -> SimConfig:
        """The configuration of ``seed``: each fault on or off, and how strong, at random."""
        rng = random.Random(f"loom-sim-config:{seed}")

        def some(rate: float, chance: float = 0.7) -> float:
            return rng.uniform(0.2, 1.0) * rate if rng.random() < chance else 0.0

        mix = {w: rng.choice((0.0, 1.0, 1.0, 2.0)) for w in WORKLOADS}
        if not any(mix.values()):
            mix["order"] = 1.0
        return cls(
            workers=rng.randint(2, 5),
            units=rng.randint(4, 10),
            mix=mix,
            chaos_seconds=rng.uniform(20.0, 60.0),
            duplicate_rate=some(0.5, 0.8),
            duplicate_calls=some(0.5, 0.7),
            kill_rate=some(0.004),
            unavailable_rate=some(0.03, 0.5),
            lost_answer_rate=some(0.03, 0.5),
            latency=rng.choice((0.001, 0.01, 0.05)),
            instant_rate=rng.uniform(0.0, 0.6),
            stall_rate=some(0.02, 0.5),
            stall_seconds=rng.uniform(1.0, 4.5),  # under half of claim_ttl (see above)
            jump_rate=some(0.05, 0.4),
            max_jump=rng.uniform(0.5, 2.0),
            client_task_rate=some(0.05, 0.3),
            effect_seconds=rng.choice((0.1, 1.0, 3.0)),
            operator_delay=rng.uniform(1.0, 10.0),
        )

    def describe(self) -> str:
        """The faults that are on, in one line."""
        on = [
            f"{name}={getattr(self, name):.3g}"
            for name in (
                "duplicate_rate",
                "duplicate_calls",
                "kill_rate",
                "unavailable_rate",
                "lost_answer_rate",
                "stall_rate",
                "jump_rate",
                "client_task_rate",
            )
            if getattr(self, name)
        ]
        mix = ",".join(f"{k}:{v:g}" for k, v in self.mix.items() if v)
        return f"workers={self.workers} units={self.units} mix={mix} " + " ".join(on)
