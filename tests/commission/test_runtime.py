"""``run_until_blocked``: recheck, admit, invoke once, record; the revision moves only on
Performed; Pending is revalidated and invoked again; refusals are recorded with their reason."""

from __future__ import annotations

import pytest

from loom.commission import (
    AdmittedRequest,
    CaseMoved,
    CaseStore,
    CompletedLocalReasoning,
    EffectError,
    HumanToolExecutor,
    NeedsHumanJudgment,
    NoUsefulAction,
    Pending,
    Performed,
    ProposedAction,
    Refused,
    StaticAuthority,
    StepInput,
    Suspended,
)
from loom.commission.events import RequestRefused
from tests.commission.helpers import CHANGE, ScriptedPort, make_runtime, open_case, scripted

PROPOSE = ProposedAction(action_id=CHANGE, args={"message": "fix"})


async def types(cases: CaseStore, case_id: str = "case-1") -> list[str]:
    return [event.type for event in await cases.history(case_id)]


async def test_a_performed_effect_moves_the_case_to_the_next_revision(cases: CaseStore) -> None:
    await open_case(cases)
    port = ScriptedPort()
    executor, seen = scripted(PROPOSE, NoUsefulAction())

    report = await make_runtime(cases, [port]).run_until_blocked("case-1", executor)

    assert report.reason == "no_useful_action"
    assert report.invoked == report.performed == ("case-1:0:1",)
    assert report.revision == 1
    assert [s.revision for s in seen] == [0, 1]
    assert seen[1].last is not None and seen[1].last.kind == "performed"
    assert seen[1].last.ref == "done-1"
    assert port.invocations[0].args == {"message": "fix"}
    assert port.commissions[0].state.assignee == "bot"
    assert (await types(cases))[-4:] == [
        "ExecutorStepped",
        "RequestAdmitted",
        "EffectPerformed",
        "ExecutorStepped",
    ]


@pytest.mark.parametrize(
    ("answers", "invoked"),
    [
        ([Refused(reason="quota")], 1),
        ([Pending(reason="queued"), Pending(reason="queued")], 2),
        ([EffectError("lost the connection", reason="transport")], 1),
    ],
    ids=["refused", "pending", "error"],
)
async def test_the_revision_moves_only_on_performed(
    cases: CaseStore, answers: list[Refused | Pending | EffectError], invoked: int
) -> None:
    await open_case(cases)
    port = ScriptedPort(answers)
    executor, _ = scripted(PROPOSE, NoUsefulAction())

    report = await make_runtime(cases, [port], max_iterations=2).run_until_blocked(
        "case-1", executor
    )

    assert report.revision == 0
    assert (await cases.load("case-1")).revision == 0
    assert "EffectPerformed" not in await types(cases)
    assert report.invoked == ("case-1:0:1",) * invoked


async def test_pending_is_invoked_again_until_the_port_answers_otherwise(
    cases: CaseStore,
) -> None:
    await open_case(cases)
    port = ScriptedPort([Pending(reason="queued"), Pending(reason="running")])
    executor, seen = scripted(PROPOSE, NoUsefulAction())

    report = await make_runtime(cases, [port]).run_until_blocked("case-1", executor)

    assert report.reason == "no_useful_action"
    assert report.invoked == ("case-1:0:1",) * 3  # the same request, invoked three times
    assert report.performed == ("case-1:0:1",)
    assert len(seen) == 2  # the executor is not asked while the request is pending
    assert report.revision == 1
    history = await types(cases)
    assert history.count("EffectPending") == 2 and history.count("EffectPerformed") == 1


async def test_a_pending_request_is_refused_not_invoked_when_the_revision_changed(
    cases: CaseStore,
) -> None:
    await open_case(cases)

    async def between_iterations(_: float) -> None:  # someone edits the case meanwhile
        await cases.revise("case-1", expected_revision=0, reason="the user edited the issue")

    port = ScriptedPort([Pending(reason="queued")])
    executor, seen = scripted(PROPOSE, NoUsefulAction())
    runtime = make_runtime(cases, [port], sleep=between_iterations)

    report = await runtime.run_until_blocked("case-1", executor)

    assert len(port.invocations) == 1
    assert report.invoked == ("case-1:0:1",)
    assert [(r.by, r.reason) for r in report.refusals] == [("runtime", "revision_changed")]
    assert report.revision == 1 and report.performed == ()
    assert seen[1].last is not None and seen[1].last.reason == "revision_changed"
    assert report.reason == "no_useful_action"


async def test_a_revision_change_during_the_invocation_is_caught_at_the_next_iteration(
    cases: CaseStore,
) -> None:
    await open_case(cases)

    async def concurrent_edit(_: AdmittedRequest) -> None:
        await cases.revise("case-1", expected_revision=0, reason="edited while in flight")

    port = ScriptedPort([Pending()], on_invoke=concurrent_edit)
    executor, _ = scripted(PROPOSE, NoUsefulAction())

    report = await make_runtime(cases, [port]).run_until_blocked("case-1", executor)

    assert len(port.invocations) == 1
    history = await types(cases)
    # The Pending answer is recorded although the case moved under it, then refused.
    assert history.index("CaseRevised") < history.index("EffectPending")
    assert history.index("EffectPending") < history.index("RequestRefused")
    assert [r.reason for r in report.refusals] == ["revision_changed"]


async def test_a_pending_request_survives_the_run_and_is_revalidated_by_the_next(
    cases: CaseStore,
) -> None:
    await open_case(cases)
    port = ScriptedPort([Pending(reason="queued")])
    executor, _ = scripted(PROPOSE, NoUsefulAction())

    first = await make_runtime(cases, [port], max_iterations=1).run_until_blocked(
        "case-1", executor
    )
    assert first.reason == "iteration_limit"
    assert (await cases.load("case-1")).open_request is not None

    authority = StaticAuthority({"bot": [CHANGE]})
    second = await make_runtime(cases, [port], authority).run_until_blocked("case-1", executor)
    assert second.invoked == ("case-1:0:1",) and second.performed == ("case-1:0:1",)
    assert second.revision == 1
    assert port.invocations[1].record.grant.by == "static"


async def test_authority_revoked_while_pending_refuses_the_next_invocation(
    cases: CaseStore,
) -> None:
    await open_case(cases)
    authority = StaticAuthority({"bot": [CHANGE]})

    async def revoke(_: float) -> None:
        authority.revoke("bot", CHANGE)

    port = ScriptedPort([Pending()])
    executor, _ = scripted(PROPOSE, NoUsefulAction())
    report = await make_runtime(cases, [port], authority, sleep=revoke).run_until_blocked(
        "case-1", executor
    )

    assert len(port.invocations) == 1
    assert [r.reason for r in report.refusals] == ["authority_denied"]


async def test_authority_denied_is_refused_with_its_reason_and_nothing_is_invoked(
    cases: CaseStore,
) -> None:
    await open_case(cases)
    port = ScriptedPort()

    def after_refusal(step: StepInput) -> NeedsHumanJudgment:
        assert step.last is not None and step.last.kind == "refused"
        return NeedsHumanJudgment(question=f"may I? ({step.last.message})")

    executor, _ = scripted(PROPOSE, after_refusal)
    authority = StaticAuthority({"bot": ["something.else/1"]}, name="policy")

    report = await make_runtime(cases, [port], authority).run_until_blocked("case-1", executor)

    assert port.invocations == []
    assert report.invoked == ()
    assert report.reason == "needs_human"
    assert "holds no authority" in report.message
    refused = [e for e in await cases.history("case-1") if isinstance(e, RequestRefused)]
    assert len(refused) == 1
    assert refused[0].refusal.reason == "authority_denied"
    assert refused[0].refusal.message.startswith("policy: 'bot' holds no authority")
    assert "RequestAdmitted" not in await types(cases)


@pytest.mark.parametrize(
    ("frontier", "action", "reason"),
    [
        ((CHANGE,), "deploy.production/1", "not_on_frontier"),
        (("deploy.production/1",), "deploy.production/1", "no_effect_port"),
    ],
)
async def test_the_recheck_refuses_and_records_why(
    cases: CaseStore, frontier: tuple[str, ...], action: str, reason: str
) -> None:
    await open_case(cases, frontier=frontier)
    port = ScriptedPort()
    executor, _ = scripted(ProposedAction(action_id=action), NoUsefulAction())

    report = await make_runtime(cases, [port]).run_until_blocked("case-1", executor)

    assert port.invocations == []
    assert [(r.by, r.reason) for r in report.refusals] == [("runtime", reason)]
    assert (await cases.load("case-1")).last is not None


async def test_nobody_works_a_case_whose_commission_is_not_assigned(cases: CaseStore) -> None:
    await open_case(cases, assignee=None)
    executor, seen = scripted(PROPOSE)
    runtime = make_runtime(cases, [ScriptedPort()])

    assert (await runtime.run_until_blocked("case-1", executor)).reason == "not_assigned"
    await cases.assign("case-1", "bot")
    await cases.close("case-1", "withdrawn")
    report = await runtime.run_until_blocked("case-1", executor)
    assert report.reason == "not_assigned" and "closed" in report.message
    assert seen == []


async def test_a_commission_closed_during_the_step_refuses_the_proposal(cases: CaseStore) -> None:
    await open_case(cases)
    port = ScriptedPort()

    async def closes_meanwhile(_: StepInput) -> ProposedAction:
        await cases.close("case-1", "withdrawn")
        return PROPOSE

    report = await make_runtime(cases, [port]).run_until_blocked(
        "case-1", scripted(closes_meanwhile)[0]
    )

    assert port.invocations == []
    assert [r.reason for r in report.refusals] == ["commission_not_assigned"]
    assert report.reason == "not_assigned"


async def test_a_proposal_made_on_a_revision_that_moved_is_refused(cases: CaseStore) -> None:
    await open_case(cases)
    port = ScriptedPort()

    async def slow_thinker(step: StepInput) -> ProposedAction:
        await cases.revise("case-1", expected_revision=step.revision, reason="moved meanwhile")
        return PROPOSE

    executor, _ = scripted(slow_thinker, NoUsefulAction())
    report = await make_runtime(cases, [port]).run_until_blocked("case-1", executor)

    assert port.invocations == []
    assert [r.reason for r in report.refusals] == ["revision_changed"]


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (NeedsHumanJudgment(question="which fix?"), "needs_human"),
        (Suspended(waiting_on="ci", correlation_key="run-9"), "suspended"),
        (NoUsefulAction(), "no_useful_action"),
        ({"kind": "Gibberish"}, "error"),
    ],
)
async def test_the_run_stops_and_says_why(cases: CaseStore, outcome: object, reason: str) -> None:
    await open_case(cases)
    executor, seen = scripted(CompletedLocalReasoning(), CaseMoved(revision=0), lambda _: outcome)

    report = await make_runtime(cases, [ScriptedPort()]).run_until_blocked("case-1", executor)

    assert report.reason == reason
    assert report.iterations == 3 and len(seen) == 3
    assert [s.step for s in seen] == [1, 2, 3]
    assert report.message


async def test_a_suspended_step_is_asked_again_at_the_same_step_number(cases: CaseStore) -> None:
    await open_case(cases)
    executor, seen = scripted(Suspended(waiting_on="ci"), NoUsefulAction())
    runtime = make_runtime(cases, [ScriptedPort()])

    assert (await runtime.run_until_blocked("case-1", executor)).reason == "suspended"
    assert (await runtime.run_until_blocked("case-1", executor)).reason == "no_useful_action"
    assert [s.step for s in seen] == [1, 1]


async def test_an_executor_that_raises_stops_the_run_with_an_error(cases: CaseStore) -> None:
    await open_case(cases)

    def broken(_: StepInput) -> None:
        raise RuntimeError("model unavailable")

    report = await make_runtime(cases, [ScriptedPort()]).run_until_blocked(
        "case-1", scripted(broken)[0]
    )

    assert report.reason == "error"
    assert report.error is not None and report.error.type == "RuntimeError"


async def test_an_effect_error_is_recorded_stops_the_run_and_is_never_reinvoked(
    cases: CaseStore,
) -> None:
    await open_case(cases)
    port = ScriptedPort([EffectError("connection reset", reason="transport")])
    executor, seen = scripted(PROPOSE, NoUsefulAction())
    runtime = make_runtime(cases, [port])

    report = await runtime.run_until_blocked("case-1", executor)
    assert report.reason == "error"
    assert report.error is not None and report.error.code == "transport"
    assert "EffectErrored" in await types(cases)

    again = await runtime.run_until_blocked("case-1", executor)
    assert again.invoked == ()  # the errored request is not invoked again
    assert seen[1].last is not None and seen[1].last.kind == "error"
    assert len(port.invocations) == 1


class Crash(BaseException):
    """The process dies mid-invocation."""


async def test_an_interrupted_invocation_is_in_doubt_until_resolved(cases: CaseStore) -> None:
    await open_case(cases)

    async def die(_: AdmittedRequest) -> None:
        raise Crash

    port = ScriptedPort(on_invoke=die)
    executor, _ = scripted(PROPOSE, NoUsefulAction())
    runtime = make_runtime(cases, [port])
    with pytest.raises(Crash):
        await runtime.run_until_blocked("case-1", executor)

    report = await runtime.run_until_blocked("case-1", executor)
    assert report.reason == "in_doubt" and report.invoked == ()
    assert len(port.invocations) == 1

    state = await runtime.resolve("case-1", "case-1:0:1", Performed(what="git.commit", ref="abc"))
    assert state.revision == 1 and state.open_request is None
    assert (await runtime.run_until_blocked("case-1", executor)).reason == "no_useful_action"


async def test_a_step_another_runner_took_is_superseded(cases: CaseStore) -> None:
    await open_case(cases)
    port = ScriptedPort()
    runtime = make_runtime(cases, [port])
    other, _ = scripted(CompletedLocalReasoning(), NoUsefulAction())

    async def races(_: StepInput) -> ProposedAction:
        await runtime.run_until_blocked("case-1", other)  # another runner works the case
        return PROPOSE

    report = await runtime.run_until_blocked("case-1", scripted(races)[0])

    assert report.reason == "superseded"
    assert port.invocations == []


async def test_executors_receive_plain_data(cases: CaseStore) -> None:
    await open_case(cases)
    executor, seen = scripted(NoUsefulAction())
    await make_runtime(cases, [ScriptedPort()]).run_until_blocked("case-1", executor)

    step = seen[0]
    assert StepInput.model_validate_json(step.model_dump_json()) == step
    assert step.assignee == "bot" and step.frontier == (CHANGE,)
    assert step.subject == {"title": "crash on start"}


async def test_a_person_works_the_case_through_a_human_tool(cases: CaseStore) -> None:
    await open_case(cases)
    tool = HumanToolExecutor()
    port = ScriptedPort()
    runtime = make_runtime(cases, [port])

    waiting = await runtime.run_until_blocked("case-1", tool)
    assert waiting.reason == "suspended"
    assert waiting.outcome == Suspended(
        waiting_on="human.tool",
        correlation_key="case-1:0",
        reason="waiting for a person's decision",
    )

    tool.submit("case-1", 0, PROPOSE)
    report = await runtime.run_until_blocked("case-1", tool)
    assert report.performed == ("case-1:0:1",)
    assert report.reason == "suspended" and report.revision == 1  # waits for the next decision
    assert len(port.invocations) == 1
