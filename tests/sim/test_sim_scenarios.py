"""Races that once broke the delivery contract, each forced by a scripted schedule in the
simulator: a stale in-doubt park, a resume appended twice or after the end, a queue run
past its concurrency by a duplicate delivery, attempts lost across calls.

Each test runs one scenario of :mod:`tests.sim.scenarios` (a schedule that makes the race
happen every time; the scenario first checks the schedule did happen, and fails outright if
it did not) and then every invariant of the simulator over what it left. On the engine
before these fixes each one broke invariants (``tests/concurrency`` pins the same races on
every store).
"""

from __future__ import annotations

from tests.sim.scenarios import run_scenario


def test_a_step_completed_meanwhile_is_never_parked_in_doubt():
    run_scenario("completed_step_parked_in_doubt").check()


def test_a_resume_delivered_twice_at_once_is_appended_once():
    run_scenario("resume_twice_at_once").check()


def test_nothing_is_appended_after_a_cancel_ended_the_execution():
    run_scenario("resume_after_cancel").check()


def test_a_duplicate_delivery_never_lets_a_queue_run_over_its_concurrency():
    run_scenario("duplicate_delivery_on_a_full_queue").check()


def test_durable_backoffs_count_every_attempt_and_the_budget_sees_them():
    run_scenario("durable_backoff_budget").check()


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
