"""A Loom flow as the executor, end to end: the flow proposes, Commission invokes.

Each step is one durable execution with the id ``{case_id}:{revision}:{step}``. The flow
reasons through its own effects (recorded, replayed) and ends by returning an outcome; the
change it proposes is made by ``LocalEffects``, never by the flow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("loom.testing")

from loom import EffectContext, FlowContext, Loom
from loom.commission import (
    CaseStore,
    FlowExecutor,
    LocalEffects,
    NeedsHumanJudgment,
    NoUsefulAction,
    ProposedAction,
    StepInput,
)
from loom.testing import LoomTestEnv
from tests.commission.helpers import (
    CHANGE,
    ScriptedPort,
    git,
    init_repo,
    make_runtime,
    open_case,
)

BRANCH = "loom/commission/case-1"


def make_app(calls: list[str]) -> Loom:
    app = Loom("commission-test")

    @app.effect("diagnose")
    async def diagnose(ctx: EffectContext, title: str) -> dict[str, Any]:
        calls.append(ctx.idempotency_key)
        return {"file": "app.py", "fix": "print('fixed')\n", "about": title}

    @app.flow("triage")
    async def triage(ctx: FlowContext, step: StepInput) -> ProposedAction | NoUsefulAction:
        if step.last is not None and step.last.kind == "performed":
            return NoUsefulAction()
        found = await ctx.execute(diagnose, str(step.subject["title"]))
        return ProposedAction(
            action_id=CHANGE,
            args={
                "message": f"Fix: {found['about']}",
                "files": [{"path": found["file"], "content": found["fix"]}],
            },
        )

    @app.flow("ask_first")
    async def ask_first(ctx: FlowContext, step: StepInput) -> ProposedAction | NoUsefulAction:
        if step.last is not None:
            return NoUsefulAction()
        approved = await ctx.suspend("approval", f"{ctx.execution_id}:approval")
        if not approved:
            return NoUsefulAction()
        return ProposedAction(action_id=CHANGE, args={"message": "approved fix"})

    @app.flow("broken")
    async def broken(ctx: FlowContext, step: StepInput) -> dict[str, Any]:
        raise RuntimeError("the model is down")

    @app.flow("chatty")
    async def chatty(ctx: FlowContext, step: StepInput) -> dict[str, Any]:
        return {"say": "hello"}

    return app


async def test_a_flow_proposes_and_commission_commits_the_change(
    cases: CaseStore, tmp_path: Path
) -> None:
    calls: list[str] = []
    env = LoomTestEnv(make_app(calls))
    work = init_repo(tmp_path / "work")
    await open_case(cases)
    runtime = make_runtime(cases, [LocalEffects(work)])

    report = await runtime.run_until_blocked("case-1", FlowExecutor(env.runtime, "triage"))

    assert report.reason == "no_useful_action"
    assert report.performed == ("case-1:0:1",) and report.revision == 1
    assert git(work, "show", f"{BRANCH}:app.py") == "print('fixed')"
    assert git(work, "log", "-1", "--format=%s", BRANCH) == "Fix: crash on start"
    assert calls == ["case-1:0:1:1"]  # the flow's own effect, keyed by its execution
    first = await env.runtime.result("case-1:0:1")
    second = await env.runtime.result("case-1:1:2")
    assert first.status == second.status == "completed"
    assert second.output == {"kind": "NoUsefulAction"}


async def test_asking_again_for_the_same_step_finds_the_same_execution(
    cases: CaseStore,
) -> None:
    calls: list[str] = []
    env = LoomTestEnv(make_app(calls))
    state = await open_case(cases)
    executor = FlowExecutor(env.runtime, "triage")

    first = await executor.step(state.step_input())
    again = await executor.step(state.step_input())  # e.g. after a crash before recording

    assert first == again and isinstance(first, ProposedAction)
    assert calls == ["case-1:0:1:1"]


async def test_a_suspended_flow_suspends_the_case_until_its_execution_is_resumed(
    cases: CaseStore,
) -> None:
    env = LoomTestEnv(make_app([]))
    await open_case(cases)
    port = ScriptedPort()
    runtime = make_runtime(cases, [port])
    executor = FlowExecutor(env.runtime, "ask_first")

    report = await runtime.run_until_blocked("case-1", executor)
    assert report.reason == "suspended"
    assert report.outcome is not None and report.outcome.kind == "Suspended"
    assert report.outcome.correlation_key == "case-1:0:1"  # type: ignore[union-attr]
    assert port.invocations == []

    await env.runtime.resume("case-1:0:1", "approval", "case-1:0:1:approval", True)
    report = await runtime.run_until_blocked("case-1", executor)

    assert report.performed == ("case-1:0:1",)
    assert report.reason == "no_useful_action"


@pytest.mark.parametrize(
    ("flow", "reason"),
    [("broken", "error"), ("chatty", "error")],
    ids=["the flow failed", "the flow returned no outcome"],
)
async def test_a_flow_that_fails_or_answers_no_outcome_stops_the_run(
    cases: CaseStore, flow: str, reason: str
) -> None:
    env = LoomTestEnv(make_app([]))
    await open_case(cases)

    report = await make_runtime(cases, [ScriptedPort()]).run_until_blocked(
        "case-1", FlowExecutor(env.runtime, flow)
    )

    assert report.reason == reason
    assert report.error is not None and report.error.type == "ExecutorError"


async def test_an_in_doubt_execution_needs_human_judgment() -> None:
    class InDoubt:
        status = "in_doubt"
        output = None

    class Runtime:
        async def start(self, flow: str, input: Any, /, **options: Any) -> InDoubt:
            return InDoubt()

    step = StepInput(
        case_id="c",
        revision=0,
        step=1,
        frontier=(),
        subject={},
        commission_id="k",
        mandate="",
        assignee="bot",
    )
    outcome = await FlowExecutor(Runtime(), "triage").step(step)
    assert isinstance(outcome, NeedsHumanJudgment)
    assert outcome.context == {"execution_id": "c:0:1"}
