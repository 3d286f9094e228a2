"""The simulator itself: deterministic, faithful to what it models, and able to see what it
checks (the invariants are shown broken logs and must say so)."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loom import events as ev
from loom.errors import StoreUnavailableError
from loom.store.base import AppendRequest
from tests.sim.app import app
from tests.sim.config import SimConfig
from tests.sim.invariants import Final, check_duplicates, check_terminal, step_problems
from tests.sim.invariants_effects import check_attempts, check_budgets, check_once
from tests.sim.ledger import Invocation
from tests.sim.loop import SimLoop, Stuck, owned_context
from tests.sim.runner import run_seed
from tests.sim.workloads import Expectations
from tests.sim.world import World

ROOT = Path(__file__).resolve().parents[2]

# -- the loop ----------------------------------------------------------------------------


def test_virtual_time_costs_no_wall_time():
    loop = SimLoop(random.Random(1))
    started = time.perf_counter()
    loop.run_until_complete(asyncio.sleep(3600.0))
    assert loop.time() == 3600.0
    assert time.perf_counter() - started < 1.0
    loop.close()


def _order(seed: int) -> list[str]:
    loop = SimLoop(random.Random(seed))
    seen: list[str] = []

    async def task(name: str) -> None:
        for _ in range(3):
            await asyncio.sleep(0)
            seen.append(name)

    async def main() -> None:
        await asyncio.gather(*(task(n) for n in "abcd"))

    loop.run_until_complete(main())
    loop.close()
    return seen


def test_the_scheduler_explores_interleavings_and_repeats_each_one():
    orders = {tuple(_order(seed)) for seed in range(20)}
    assert len(orders) > 5  # ready tasks run in many orders across seeds
    assert _order(7) == _order(7)  # and in the same order again for the same seed


def test_a_killed_worker_never_runs_again_not_even_its_finally():
    loop = SimLoop(random.Random(1))
    done: list[str] = []

    async def worker(name: str) -> None:
        try:
            await asyncio.sleep(1.0)
            done.append(f"{name} woke")
        finally:
            done.append(f"{name} finally")

    async def main() -> asyncio.Task[None]:
        doomed = loop.create_task(worker("w1"), context=owned_context("w1"))
        loop.create_task(worker("w2"), context=owned_context("w2"))
        await asyncio.sleep(0.5)
        loop.kill("w1")
        await asyncio.sleep(2.0)
        return doomed

    doomed = loop.run_until_complete(main())
    assert done == ["w2 woke", "w2 finally"]
    assert not doomed.done()  # suspended where it was, not cancelled
    assert loop.frozen  # its wake-up was kept, never run


def test_a_worker_dies_at_an_await_when_the_world_says_so():
    loop = SimLoop(random.Random(1))
    steps: list[int] = []
    callbacks = {"w1": 0}

    def dies(owner: str) -> bool:
        callbacks[owner] += 1
        # The task's start, then per sleep its timer and its wake-up: the fifth is the
        # wake-up after the second sleep.
        return callbacks[owner] == 5

    loop.before_callback = dies

    async def work() -> None:
        for i in range(5):
            steps.append(i)
            await asyncio.sleep(0.1)

    async def main() -> None:
        loop.create_task(work(), context=owned_context("w1"))
        await asyncio.sleep(1.0)

    loop.run_until_complete(main())
    assert steps == [0, 1]
    assert not loop.alive("w1")


def test_a_world_that_can_never_move_again_is_reported_stuck():
    loop = SimLoop(random.Random(1))
    with pytest.raises(Stuck):
        loop.run_until_complete(loop.create_future())


# -- the store between a worker and the shared logs --------------------------------------


def _world(**config: Any) -> World:
    world = World(0, SimConfig.calm(**config), app)
    world.chaos = True
    return world


def _append_through(world: World) -> BaseException | None:
    from tests.sim.store import SimStore

    store = SimStore(world, world.raw, "w1")
    started = ev.ExecutionStarted(execution_id="e1", flow="sim.pay")

    async def go() -> BaseException | None:
        await world.raw.create(started)
        event = ev.ExecutionClaimed(holder="h", until=1.0, seq=2)
        try:
            await store.append(AppendRequest("e1", 1, [event]))
        except StoreUnavailableError as exc:
            return exc
        return None

    return world.loop.run_until_complete(go())


def test_a_lost_answer_is_an_error_for_a_write_that_applied():
    world = _world(lost_answer_rate=1.0)
    assert isinstance(_append_through(world), StoreUnavailableError)
    assert world.loop.run_until_complete(world.raw.summary("e1")).last_seq == 2


def test_an_outage_is_an_error_for_a_write_that_did_not_apply():
    world = _world(unavailable_rate=1.0)
    assert isinstance(_append_through(world), StoreUnavailableError)
    assert world.loop.run_until_complete(world.raw.summary("e1")).last_seq == 1


# -- whole runs --------------------------------------------------------------------------


def test_a_seed_runs_the_same_twice():
    first, again, other = run_seed(11), run_seed(11), run_seed(12)
    assert first.digest == again.digest
    assert first.violations == again.violations
    assert first.digest != other.digest


@pytest.mark.slow
def test_a_seed_runs_the_same_in_another_process_with_other_string_hashes():
    """Set iteration order of strings changes with ``PYTHONHASHSEED``: nothing a run decides
    may depend on it, or a seed printed by CI would not reproduce on a laptop."""
    code = "from tests.sim.runner import run_seed; print(run_seed(11).digest)"
    env = {**os.environ, "PYTHONHASHSEED": "4242", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == run_seed(11).digest


CALM_MIX = {"order": 1.0, "queued": 1.0, "family": 1.0, "mailbox": 1.0, "sleeper": 1.0}


@pytest.mark.parametrize("seed", range(4))
def test_a_calm_world_breaks_no_invariant(seed: int):
    """No fault, no duplicate: whatever the invariants report here would be the harness's
    own mistake. (Durable backoffs are left out until issue 31's item 6 is fixed: their
    attempts are undercounted even in a calm world.)"""
    report = run_seed(seed, SimConfig.calm(units=10, mix=CALM_MIX))
    report.check()
    assert sum(report.statuses.values()) >= 10
    assert set(report.statuses) <= {"completed", "cancelled", "failed"}


def test_the_cli_prints_a_failing_seeds_reproduction_and_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """With a bug put back on purpose (a message id no longer recognised as a repeat, so a
    redelivered message is taken twice), some seed fails, and the CLI says how to rerun it."""
    from loom.primitives import mailbox
    from tests.sim.__main__ import main

    monkeypatch.setattr(mailbox, "known", lambda state, message_id: False)
    failing = next(s for s in range(200) if not run_seed(s).ok)
    assert main(["--seed", str(failing)]) == 1
    assert f"reproduce: python -m tests.sim --seed {failing}" in capsys.readouterr().out


# -- the invariants see what they check --------------------------------------------------


def _final(logs: dict[str, list[ev.Event]], invocations: list[Invocation] = ()) -> Final:  # type: ignore[assignment]
    world = World(0, SimConfig.calm(), app)
    for inv in invocations:
        world.ledger.invocations.append(inv)
        world.ledger.by_key[inv.key].append(inv)
    states = {}
    from loom.kernel.fold import fold

    for eid, events in logs.items():
        states[eid] = fold(events)
    return Final(world, Expectations(), logs, {}, states)


def _numbered(*events: ev.Event) -> list[ev.Event]:
    ev.number(list(events), 0, 0.0)
    return list(events)


def _start(eid: str = "e1", **fields: Any) -> ev.ExecutionStarted:
    return ev.ExecutionStarted(execution_id=eid, flow="sim.pay", **fields)


def test_a_step_parked_in_doubt_after_it_completed_is_seen():
    started = ev.EffectStarted(step_id="1", effect="sim.charge", idempotency_key="e1:1")
    completed = ev.EffectCompleted(step_id="1", effect="sim.charge")
    doubt = ev.EffectInDoubt(step_id="1", effect="sim.charge")
    assert step_problems(_numbered(started, completed, doubt))
    redone = ev.EffectStarted(step_id="1", effect="sim.charge", idempotency_key="e1:1", attempt=2)
    verdict = ev.EffectVerdict(step_id="1", verdict="not_performed")
    started = ev.EffectStarted(step_id="1", effect="sim.charge", idempotency_key="e1:1")
    doubt = ev.EffectInDoubt(step_id="1", effect="sim.charge")
    completed = ev.EffectCompleted(step_id="1", effect="sim.charge")
    assert step_problems(_numbered(started, doubt, verdict, redone, completed)) == []


def test_an_event_after_the_end_and_a_resume_twice_are_seen():
    log = _numbered(
        _start(),
        ev.ExecutionResumed(on="approve", correlation_key="k"),
        ev.ExecutionCompleted(),
        ev.ExecutionResumed(on="approve", correlation_key="k"),
    )
    final = _final({"e1": log})
    check_terminal(final)
    check_duplicates(final)
    assert [v.invariant for v in final.world.violations] == ["log.terminal", "log.duplicates"]


def _inv(n: int, key: str, attempt: int, idempotent: bool = True) -> Invocation:
    eid, step = key.rsplit(":", 1)
    return Invocation(n, key, eid, step, attempt, "sim.flaky", idempotent, "w1", 0.0, "x", None)


def test_attempts_the_log_does_not_count_are_seen():
    log = _numbered(
        _start(budgets={"max_attempts": 2}),
        ev.EffectCompleted(step_id="1", effect="sim.flaky", attempts=1),
        ev.EffectCompleted(step_id="2", effect="sim.flaky", attempts=1),
    )
    final = _final({"e1": log}, [_inv(0, "e1:1", 1), _inv(1, "e1:1", 2), _inv(2, "e1:2", 1)])
    check_attempts(final)
    check_budgets(final)
    seen = [v.invariant for v in final.world.violations]
    assert seen == ["attempts.recorded", "attempts.meter", "budgets"]


def test_a_non_idempotent_attempt_invoked_twice_is_seen():
    final = _final(
        {"e1": _numbered(_start())}, [_inv(0, "e1:1", 1, False), _inv(1, "e1:1", 1, False)]
    )
    check_once(final)
    assert [v.invariant for v in final.world.violations] == ["effects.once"]


def test_an_attempt_begun_and_lost_before_it_ran_may_be_counted_but_no_more():
    """Attempt 2 was recorded as beginning and its worker died before invoking it: the log
    may count it (nobody can tell), never an attempt that was not even begun."""
    retried = ev.EffectRetried(step_id="1", effect="sim.flaky", attempt=2)
    for counted, broken in ((2, []), (3, ["attempts.recorded", "attempts.meter"])):
        completed = ev.EffectCompleted(step_id="1", effect="sim.flaky", attempts=counted)
        final = _final({"e1": _numbered(_start(), retried, completed)}, [_inv(0, "e1:1", 1)])
        check_attempts(final)
        assert [v.invariant for v in final.world.violations] == broken


def test_the_per_worker_limit_is_watched(monkeypatch: pytest.MonkeyPatch):
    """With the worker's own count ignored, some worker runs two executions of ``q3`` (its
    ``worker_concurrency`` is 1) at once, and the ledger says so; with it, none does."""
    import loom.primitives.queue_options as qo

    assert run_seed(2).ok
    counted = qo.take_worker_slot
    monkeypatch.setattr(qo, "take_worker_slot", lambda rt, q, limit: counted(rt, q, None))
    assert "queues.worker_concurrency" in run_seed(2).by_invariant()
