"""One simulated run: build the world of a seed, run the chaos, drain, check, report.

:func:`run_seed` is the whole simulator seen from outside. A run has three phases:

1. **Chaos** (``config.chaos_seconds`` of virtual time): the workload's clients start
   executions and drive them; deliveries are duplicated, workers die at awaits, the store
   stalls, fails and loses answers, the clock jumps, and an operator settles what falls in
   doubt.
2. **Drain**: the faults stop. Rounds of: wait until no request is under way; the operator
   settles doubts and retries poison; claims are left to expire and a sweep
   (``loom.workers.tasks_maintenance.sweep``) redispatches what is stranded. Until every
   execution has ended or is parked, or the rounds run out.
3. **Checks**: the invariants of :mod:`tests.sim.invariants` and
   :mod:`tests.sim.invariants_effects` over the final logs and the ledger.

Everything is a function of its seed (and of the scenario, for a scripted run): the same
seed gives the same :attr:`Report.digest`, in this process or another. A failing run's
:meth:`Report.repro` is the one line that runs it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import sys
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from loom.errors import LoomError
from loom.runtime import Runtime
from loom.store.base import ExecutionSummary
from loom.workers.tasks_maintenance import sweep
from tests.sim import invariants, invariants_effects
from tests.sim.app import app, bind, unbind
from tests.sim.config import SimConfig
from tests.sim.loop import Stuck, neutral_context
from tests.sim.patches import engine_patched
from tests.sim.requests import Requests, SimDispatcher
from tests.sim.workloads import Clients, Operator
from tests.sim.world import Violation, World

Script = Callable[[World, Clients], Awaitable[None]]
"""A scenario: drives the world by hand instead of the sampled workload."""

DRAIN_ROUNDS = 30


class ViolationsFoundError(AssertionError):
    """A run broke invariants; the message is its report, with the line to run it again."""


@dataclass
class Report:
    """What one run came to."""

    seed: int
    config: SimConfig
    violations: list[Violation] = field(default_factory=list[Violation])
    stats: Counter[str] = field(default_factory=Counter[str])
    statuses: Counter[str] = field(default_factory=Counter[str])
    virtual_seconds: float = 0.0
    wall_seconds: float = 0.0
    digest: str = ""
    scenario: str | None = None

    @property
    def ok(self) -> bool:
        """No invariant broken."""
        return not self.violations

    def check(self) -> None:
        """Raise :class:`ViolationsFoundError` with the report if an invariant broke."""
        if self.violations:
            raise ViolationsFoundError(self.text())

    def by_invariant(self) -> Counter[str]:
        """Violations counted by invariant."""
        return Counter(v.invariant for v in self.violations)

    def repro(self) -> str:
        """The one line that runs this seed again."""
        if self.scenario is not None:
            return f"python -m pytest tests/sim/test_sim_scenarios.py -k {self.scenario}"
        return f"python -m tests.sim --seed {self.seed}"

    def text(self, limit: int = 20) -> str:
        """A readable report: its seed, the world, what broke, how to run it again."""
        lines = [
            f"seed {self.seed}: {len(self.violations)} violation(s) "
            f"{dict(self.by_invariant())} in {self.virtual_seconds:.0f} virtual s",
            f"  world: {self.config.describe()}",
            f"  executions: {dict(self.statuses)}",
        ]
        lines += [f"  {v.line()}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  … and {len(self.violations) - limit} more")
        lines.append(f"  reproduce: {self.repro()}")
        return "\n".join(lines)


def run_seed(
    seed: int,
    config: SimConfig | None = None,
    script: Script | None = None,
    inspect: Callable[[invariants.Final], None] | None = None,
) -> Report:
    """Run the simulation of ``seed`` (its sampled configuration unless ``config``; the
    sampled workload unless ``script``) and check it; ``inspect`` is shown what the run
    left behind (the logs, the ledger) before it is torn down."""
    report = Report(
        seed, config or SimConfig.sample(seed), scenario=getattr(script, "__name__", None)
    )
    collecting = gc.isenabled()
    gc.disable()  # (a collection at a random moment would run some abandoned ``finally``)
    try:
        _run(report, script, inspect)
        gc.collect(0)  # the world is gone: all it made is young garbage (nothing collected it)
    finally:
        if collecting:
            gc.enable()
    return report


def _run(
    report: Report, script: Script | None, inspect: Callable[[invariants.Final], None] | None
) -> None:
    world = World(report.seed, report.config, app)
    bind(world)
    started = time.perf_counter()
    with engine_patched(report.seed, world.clock, world.new_holder):
        try:
            world.loop.run_until_complete(_main(world, script, report, inspect))
        except Stuck as exc:
            world.violation("sim.stuck", None, str(exc))
        finally:
            report.violations = list(world.violations)
            report.stats = Counter(world.stats)
            report.virtual_seconds = world.loop.time()
            _teardown(world)
    report.wall_seconds = time.perf_counter() - started


async def _main(
    world: World,
    script: Script | None,
    report: Report,
    inspect: Callable[[invariants.Final], None] | None,
) -> None:
    requests = Requests(world)
    clients = Clients(world, requests)
    observer = Runtime(app, world.raw, dispatcher=SimDispatcher(world), clock=world.clock)
    operator = Operator(world, clients, observer)
    for _ in range(world.config.workers):
        world.spawn()
    background = [_operator_loop(world, operator), _clock_jumps(world)]
    loop = world.loop
    for coro in background:
        loop.create_task(coro, context=neutral_context())
    if script is not None:
        await script(world, clients)
    else:
        clients.plan()
        world.chaos = True
        await asyncio.sleep(world.config.chaos_seconds)
        world.chaos = False
    await _drain(world, operator, observer)
    final = await invariants.read_final(world, clients.expect)
    for check in [*invariants.CHECKS, *invariants_effects.CHECKS]:
        check(final)
    await invariants.check_replay(final)
    for where in requests.stuck():
        world.violation("engine.hang", None, f"{where} never answered")
    for error in loop.errors:
        world.violation("engine.loop", None, error)
    report.statuses = Counter(s.status for s in final.states.values())
    report.digest = _digest(final)
    if inspect is not None:
        inspect(final)
    await _forget(world, final)


async def _forget(world: World, final: invariants.Final) -> None:
    """Drop what the run wrote: the engine keeps some sessions it cancelled for good (and,
    through them, whatever they reach), which must not keep every log of every run."""
    for eid in final.logs:
        await world.raw.delete_execution(eid)
    world.ledger.invocations.clear()
    world.ledger.by_key.clear()
    world.trace.clear()


async def _operator_loop(world: World, operator: Operator) -> None:
    while True:
        await asyncio.sleep(world.config.operator_delay)
        await operator.look(drain=False)


async def _clock_jumps(world: World) -> None:
    rng, cfg = world.rng("clock"), world.config
    while True:
        await asyncio.sleep(1.0)
        if world.chaos and cfg.jump_rate and rng.random() < cfg.jump_rate:
            world.jump_clock(rng.uniform(-cfg.max_jump, cfg.max_jump))


async def quiet(world: World, limit: float = 600.0) -> None:
    """Wait (virtual time) until no request is scheduled or under way, ``limit`` at most."""
    assert world.requests is not None
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(world.requests.idle.wait(), limit)


async def _drain(world: World, operator: Operator, observer: Runtime) -> None:
    """Settle the world: until every execution ended or is parked, or a round changes
    nothing (what is left then is for the liveness check to report)."""
    before = None
    for _ in range(DRAIN_ROUNDS):
        await quiet(world)
        rows = await world.raw.list(limit=1_000_000)
        progress = (sum(r.last_seq for r in rows), len(world.ledger.invocations))
        if progress == before or not [r for r in rows if _unsettled(r)]:
            return
        before = progress
        await operator.look(drain=True)
        await quiet(world)
        await asyncio.sleep(world.config.claim_ttl + 1.0)  # let every claim lapse
        try:
            await sweep(observer, grace=world.config.claim_ttl, clock=world.clock)
        except LoomError as exc:
            world.stats[f"sweep.{type(exc).__name__}"] += 1


def _unsettled(row: ExecutionSummary) -> bool:
    return row.status not in ("completed", "failed", "cancelled") and row.parked_reason is None


def _digest(final: invariants.Final) -> str:
    """A fingerprint of the run's outcome: every event (times included, durations measured
    on the real clock left out) and every invocation."""
    h = hashlib.sha256()
    for eid in sorted(final.logs):
        for e in final.logs[eid]:
            fields = e.model_dump(mode="json", exclude={"duration_s"})
            h.update(repr(sorted(fields.items())).encode())
    for inv in final.world.ledger.invocations:
        h.update(repr((inv.key, inv.attempt, inv.worker, round(inv.at, 6))).encode())
    return h.hexdigest()[:16]


def _teardown(world: World) -> None:
    """End the run's tasks (the dead's, and whatever was left waiting) quietly.

    Their coroutines are closed here, while the run's patches still stand, so what their
    ``finally`` blocks touch is this run's and nothing of it runs later, in another run,
    whenever the garbage collector gets to it."""
    loop = world.loop
    loop.tearing_down = True
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _: None  # (a coroutine closed mid-await complains)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for task in asyncio.all_tasks(loop):
                with contextlib.suppress(BaseException):
                    task.get_coro().close()  # pyright: ignore[reportOptionalMemberAccess]
            # A handle still held elsewhere (a timer a module keeps per loop) must not keep
            # the loop, and with it the whole world, alive.
            for handle in [*loop.frozen, *loop._ready, *loop._scheduled]:  # pyright: ignore[reportPrivateUsage]
                handle._loop = None  # pyright: ignore[reportAttributeAccessIssue]
            loop.frozen.clear()
            loop._ready.clear()  # pyright: ignore[reportPrivateUsage]
            loop._scheduled.clear()  # pyright: ignore[reportPrivateUsage]
            loop.close()
            unbind()
    finally:
        sys.unraisablehook = hook
