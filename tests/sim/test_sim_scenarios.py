"""Issue 31's items 1, 2, 3 and 6, each forced by a scripted race in the simulator.

Each test runs one scenario of :mod:`tests.sim.scenarios` (a schedule that makes the race
happen every time; the scenario first checks the schedule did happen) and then every
invariant of the simulator over what it left. On the engine before the issue's fixes each
one breaks invariants, hence ``xfail(strict=True)``, for the violations only
(:class:`~tests.sim.runner.ViolationsFoundError`): remove the marker once the fix lands, and
an unexpected pass reminds whoever forgets. A scenario whose schedule did not happen fails
outright (``AssertionError``), never as an expected failure.
"""

from __future__ import annotations

import pytest

from tests.sim.runner import ViolationsFoundError
from tests.sim.scenarios import run_scenario


def known(item: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(
        strict=True, raises=ViolationsFoundError, reason=f"issue 31 item {item}, not fixed yet"
    )


@known("1: a control append re-appends what a stale state decided")
def test_a_step_completed_meanwhile_is_never_parked_in_doubt():
    run_scenario("completed_step_parked_in_doubt").check()


@known("2: a resume decided on a stale state is appended again")
def test_a_resume_delivered_twice_at_once_is_appended_once():
    run_scenario("resume_twice_at_once").check()


@known("2: a resume decided on a stale state lands after the end")
def test_nothing_is_appended_after_a_cancel_ended_the_execution():
    run_scenario("resume_after_cancel").check()


@known("3: the queue lease belongs to the execution, not to the claim")
def test_a_duplicate_delivery_never_lets_a_queue_run_over_its_concurrency():
    run_scenario("duplicate_delivery_on_a_full_queue").check()


@known("6: attempts made before a durable backoff are not counted")
def test_durable_backoffs_count_every_attempt_and_the_budget_sees_them():
    run_scenario("durable_backoff_budget").check()


@known("6: attempts made before a crash are not counted")
def test_attempts_made_before_a_crash_are_counted():
    run_scenario("killed_mid_retries").check()


def test_a_charge_its_worker_died_in_is_settled_from_the_ledger():
    """The path every in-doubt scenario relies on works today: the kill, the lapsed claim,
    the sweep, the park in doubt, the operator's ``performed`` verdict, the end."""
    report = run_scenario("killed_in_a_charge")
    report.check()
    assert report.statuses == {"completed": 1}
    assert report.stats["verdict.ok"] == 1
    assert report.stats["kills"] == 1
