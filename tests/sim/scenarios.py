"""Scripted races: the interleavings of issue 31's items 1, 2, 3 and 6, forced on purpose.

The random runs find these races by chance; each scenario here sets the schedule so the race
happens every time: which worker gets which delivery (:attr:`Requests.route
<tests.sim.requests.Requests.route>`), how late a store call's answer comes
(:meth:`Faults.script <tests.sim.store.Faults.script>`), when a worker dies
(:attr:`Ledger.on_invoke <tests.sim.ledger.Ledger.on_invoke>`). The world is otherwise calm
(no random fault). After the script, the runner drains the world and checks every invariant
as for a random run, so a scenario passes exactly when the engine handles the race.

Each scenario also checks, with :func:`require`, that the schedule it set up really
happened (something about the order of calls, never about what the engine decided), so it
cannot pass by missing its race.

To add one: write ``async def name(world, clients)`` here, with the config it needs in
:data:`SCENARIOS`, and a test in ``tests/sim/test_sim_scenarios.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.sim.config import SimConfig
from tests.sim.ledger import Invocation
from tests.sim.requests import Request, delivery
from tests.sim.runner import Report, Script, run_seed
from tests.sim.workloads import Clients
from tests.sim.world import EPOCH, World


def require(condition: bool, what: str) -> None:
    """Fail the scenario (not as a violation) if its schedule did not happen."""
    if not condition:
        raise AssertionError(f"the scenario's schedule did not happen: {what}")


def _began(world: World, execution_id: str) -> list[tuple[float, str | None]]:
    """When, and on which worker, each execute call of ``execution_id`` began."""
    return [(t, w) for t, w, what in world.trace if what == f"execute {execution_id} begins"]


async def completed_step_parked_in_doubt(world: World, clients: Clients) -> None:
    """Item 1. A delivery loads the log while another worker is inside the step's charge;
    that worker records the outcome and goes on; the first one's load answers 25 s late,
    its claim check finds the holder's claim expired, and it parks the step in doubt from
    the state it loaded, though the step completed meanwhile."""
    requests = clients.requests
    duplicate = delivery(ExecutionPackage(execution_id="pay-1"))
    requests.route = lambda r: "w2" if r is duplicate else "w1"
    world.faults.script("w2", "load", 1, after=25.0)
    clients.call("start", 0.0, lambda rt: rt.start("sim.pay", {"secs": 2.0}, execution_id="pay-1"))
    requests.send(duplicate, delay=1.0)
    clients.resume("pay-1", 40.0, copies=1)
    await asyncio.sleep(60.0)
    log = await world.raw.read("pay-1")
    done = [e.at - EPOCH for e in log if e.type == "EffectCompleted"]
    require(bool(done) and done[0] < 26.0, "the charge's outcome was written before the late load")
    require([w for _, w in _began(world, "pay-1")][:2] == ["w1", "w2"], "two deliveries at once")


async def resume_twice_at_once(world: World, clients: Clients) -> None:
    """Item 2. The same resume is delivered twice at once; the second copy's load answers
    late, after the first copy's resume ran the execution to its end."""
    requests = clients.requests
    copies: list[str] = []

    def route(request: Request) -> str:
        if request.kind != "resume":
            return "w1"
        copies.append("w1" if not copies else "w2")
        return copies[-1]

    def timing(worker: str, op: str, about: str) -> tuple[float, float] | None:
        if world.loop.time() < 5.0 or about != "pay-2":
            return None
        if worker == "w1" and op == "append":  # the first copy takes its time to write
            return (0.2, 0.0)
        if worker == "w2" and op == "load":  # the second copy's load answers late
            return (0.0, 5.0)
        return None

    requests.route = route
    world.faults.timing = timing
    clients.call("start", 0.0, lambda rt: rt.start("sim.pay", {"secs": 0.5}, execution_id="pay-2"))
    clients.resume("pay-2", 5.0, copies=2)
    await asyncio.sleep(30.0)
    log = await world.raw.read("pay-2")
    ended = [e.at - EPOCH for e in log if e.type == "ExecutionCompleted"]
    require(copies == ["w1", "w2"], "the resume went to two workers at once")
    require(bool(ended) and ended[0] < 10.0, "the run ended before the late copy's load answered")


async def resume_after_cancel(world: World, clients: Clients) -> None:
    """Item 2, its other form: a resume decided on a stale state lands after a cancel ended
    the execution."""
    requests = clients.requests
    requests.route = lambda r: "w2" if r.kind == "resume" else "w1"
    world.faults.script("w2", "load", 1, after=5.0)
    clients.call("start", 0.0, lambda rt: rt.start("sim.pay", {"secs": 0.5}, execution_id="pay-3"))
    clients.resume("pay-3", 5.0, copies=1)
    cancel = lambda rt: rt.cancel("pay-3", "changed my mind", by="client")  # noqa: E731
    clients.call("cancel", 6.0, cancel, about="pay-3")
    await asyncio.sleep(30.0)
    log = await world.raw.read("pay-3")
    ended = [e.at - EPOCH for e in log if e.type == "ExecutionCancelled"]
    require(bool(ended) and ended[0] < 10.0, "the cancel ended the run before the late load")


async def duplicate_delivery_on_a_full_queue(world: World, clients: Clients) -> None:
    """Item 3. One execution of a concurrency-1 queue is delivered to two workers at once;
    both take the queue's lease (the same holder, the execution), one loses the claim and
    releases the lease the other still holds; the next execution of the queue is let in."""
    requests = clients.requests
    duplicate = delivery(ExecutionPackage(execution_id="x"))
    requests.route = lambda r: "w2" if r is duplicate else "w3" if r.about == "y" else "w1"
    world.faults.script("w1", "append", 1, before=0.5)  # w1's claim lands after w2's
    inp = {"q": "q1", "steps": 1, "secs": 5.0, "fail": 0.0}
    for eid, at in (("x", 0.0), ("y", 2.0)):
        start = _starter(eid, inp)
        clients.call("start", at, start, about=eid)
    requests.send(duplicate, delay=0.01)
    await asyncio.sleep(30.0)
    began = _began(world, "x")
    require(
        sorted(w or "" for _, w in began[:2]) == ["w1", "w2"] and began[1][0] < 0.5,
        "x was delivered to two workers before either claimed it",
    )


def _starter(eid: str, inp: dict[str, Any]) -> Callable[[Runtime], Awaitable[object]]:
    return lambda rt: rt.start("sim.queued", inp, execution_id=eid, queue=QueueRef("q1"))


async def durable_backoff_budget(world: World, clients: Clients) -> None:
    """Item 6. Three steps each fail their first attempt and retry after a backoff long
    enough to be a durable timer, under ``budgets={"max_attempts": 4}``: inline, the third
    step is refused after four attempts; the attempts of a durable retry must count too."""
    start = lambda rt: rt.start(  # noqa: E731
        "sim.backoff", {"fails": [1, 1, 1]}, execution_id="b-1", budgets={"max_attempts": 4}
    )
    clients.call("start", 0.0, start, about="b-1")
    await asyncio.sleep(200.0)
    retried = [e for e in await world.raw.read("b-1") if e.type == "EffectRetried"]
    require(any(e.not_before is not None for e in retried), "a retry waited on a durable timer")  # type: ignore[union-attr]


async def killed_mid_retries(world: World, clients: Clients) -> None:
    """Item 6, after a crash: an idempotent step fails attempt 1, and its worker dies in
    attempt 2; the next execute call goes on at attempt 3, which succeeds. Its record must
    count the three attempts made."""

    def kill_in_attempt_2(inv: Invocation) -> None:
        if inv.key == "r-1:1" and inv.attempt == 2 and inv.worker is not None:
            world.kill(inv.worker)

    world.ledger.on_invoke = kill_in_attempt_2
    clients.requests.route = lambda r: "w1" if world.loop.alive("w1") else "w2"
    start = lambda rt: rt.start("sim.retrying", {"fail_until": 3}, execution_id="r-1")  # noqa: E731
    clients.call("start", 0.0, start, about="r-1")
    await asyncio.sleep(60.0)
    require(not world.loop.alive("w1"), "the worker died in attempt 2")


async def killed_in_a_charge(world: World, clients: Clients) -> None:
    """Not a bug: a worker dies inside a non-idempotent charge. Its claim lapses, a sweep
    redispatches the execution, which parks in doubt; the operator finds the charge in the
    ledger and answers ``performed`` with what it returned; the flow goes on from there."""

    def kill_in_the_charge(inv: Invocation) -> None:
        if inv.effect == "sim.charge" and inv.worker is not None:
            world.kill(inv.worker)

    world.ledger.on_invoke = kill_in_the_charge
    clients.requests.route = lambda r: "w1" if world.loop.alive("w1") else "w2"
    start = lambda rt: rt.start("sim.pay", {"secs": 1.0}, execution_id="k-1")  # noqa: E731
    clients.call("start", 0.0, start, about="k-1")
    clients.resume("k-1", 5.0, copies=1)
    await asyncio.sleep(30.0)
    require(not world.loop.alive("w1"), "the worker died in the charge")


SCENARIOS: dict[str, tuple[Script, SimConfig]] = {
    "completed_step_parked_in_doubt": (completed_step_parked_in_doubt, SimConfig.calm(workers=2)),
    "resume_twice_at_once": (resume_twice_at_once, SimConfig.calm(workers=2)),
    "resume_after_cancel": (resume_after_cancel, SimConfig.calm(workers=2)),
    "duplicate_delivery_on_a_full_queue": (
        duplicate_delivery_on_a_full_queue,
        SimConfig.calm(workers=3),
    ),
    "durable_backoff_budget": (durable_backoff_budget, SimConfig.calm(workers=1)),
    "killed_mid_retries": (killed_mid_retries, SimConfig.calm(workers=2)),
    "killed_in_a_charge": (killed_in_a_charge, SimConfig.calm(workers=2)),
}


def run_scenario(name: str, seed: int = 0) -> Report:
    """Run scenario ``name`` (see :data:`SCENARIOS`)."""
    script, config = SCENARIOS[name]
    return run_seed(seed, config, script)
