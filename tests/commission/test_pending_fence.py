"""A Pending request is invoked again under the same fence as a first admission.

The recheck's verdict is appended as an intent record at exactly the seq the recheck read:
a revision change during the check is seen (refused, not invoked), racing runners invoke
it once, and the answer of the one invocation is recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from loom.commission import (
    AuthorityProvider,
    CaseStore,
    NoUsefulAction,
    Pending,
    Performed,
    ProposedAction,
)
from loom.commission.authority import AuthorityDecision, AuthorityQuery, Granted
from loom.commission.model import Assigned, Commission
from tests.commission.helpers import CHANGE, ScriptedPort, make_runtime, open_case, scripted

PROPOSE = ProposedAction(action_id=CHANGE, args={"message": "fix"})


class HookedAuthority(AuthorityProvider):
    """Grants everything, running ``hook`` (with the call number) inside each check."""

    def __init__(self, hook: Callable[[int], Awaitable[None]]) -> None:
        self.calls = 0
        self.hook = hook

    async def authorize(
        self, commission: Commission[Assigned], query: AuthorityQuery
    ) -> AuthorityDecision:
        self.calls += 1
        await self.hook(self.calls)
        return Granted(by="hooked")


async def _pending_case(cases: CaseStore) -> None:
    await open_case(cases)
    port = ScriptedPort([Pending(reason="queued")])
    executor, _ = scripted(PROPOSE)
    first = await make_runtime(cases, [port], max_iterations=1).run_until_blocked(
        "case-1", executor
    )
    assert first.reason == "iteration_limit"
    opened = (await cases.load("case-1")).open_request
    assert opened is not None and opened.status == "pending"


async def test_a_revision_change_during_the_recheck_is_not_invoked(cases: CaseStore) -> None:
    await _pending_case(cases)

    async def edit_during_check(call: int) -> None:
        if call == 1:  # the authority answers only after the case moved to revision 1
            await cases.revise("case-1", expected_revision=0, reason="edited during the check")

    port = ScriptedPort([Performed(what="test.effect", ref="late")])
    executor, _ = scripted(NoUsefulAction())
    runtime = make_runtime(cases, [port], HookedAuthority(edit_during_check))
    report = await runtime.run_until_blocked("case-1", executor)

    assert port.invocations == []  # never invoked under revision 0 after the move
    assert [r.reason for r in report.refusals] == ["revision_changed"]
    history = [e.type for e in await cases.history("case-1")]
    assert "RequestReinvoked" not in history and history[-2:] == [
        "RequestRefused",
        "ExecutorStepped",
    ]


async def test_racing_runners_invoke_a_pending_request_once_and_record_its_answer(
    cases: CaseStore,
) -> None:
    await _pending_case(cases)
    both_checking = asyncio.Event()

    async def meet(call: int) -> None:  # both rechecks read the case before either appends
        if call == 2:
            both_checking.set()
        await asyncio.wait_for(both_checking.wait(), 5)

    port = ScriptedPort([Performed(what="test.effect", ref="once")] * 2)
    authority = HookedAuthority(meet)
    runners = [
        make_runtime(cases, [port], authority).run_until_blocked(
            "case-1", scripted(NoUsefulAction())[0]
        )
        for _ in range(2)
    ]
    reports = await asyncio.gather(*runners)

    assert authority.calls >= 2
    assert len(port.invocations) == 1  # once across both runners
    assert sorted(r.performed for r in reports) == [(), ("case-1:0:1",)]
    history = [e.type for e in await cases.history("case-1")]
    assert history.count("RequestReinvoked") == 1 and history.count("EffectPerformed") == 1
    assert (await cases.load("case-1")).revision == 1
