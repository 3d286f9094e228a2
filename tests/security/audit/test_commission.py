"""Commission under attack: proposals JSON cannot record exactly, two runners racing one
proposal, an authority provider that fails, and resolving a request that is not open.

Cases live on a SQLite event store (two stores over one file stand for two processes);
the effect port is the Commission tests' scripted port, which records every invocation.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from loom.commission import (
    AuthorityProvider,
    CaseStore,
    CommissionError,
    NeedsHumanJudgment,
    NoUsefulAction,
    Performed,
    ProposedAction,
)
from loom.commission.authority import AuthorityDecision, AuthorityQuery, Granted
from loom.commission.model import Assigned, Commission
from loom.store.sqlite import SqliteEventStore
from tests.commission.helpers import CHANGE, ScriptedPort, make_runtime, open_case, scripted


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "cases.db"


async def types(cases: CaseStore) -> list[str]:
    return [e.type for e in await cases.history("case-1")]


@pytest.mark.parametrize(
    "outcome",
    [
        ProposedAction(action_id=CHANGE, args={"amount": math.nan}),
        ProposedAction(
            action_id=CHANGE, args={"n": [1, {"deep": json.loads("[" * 200 + "]" * 200)}]}
        ),
        ProposedAction(action_id=CHANGE, args={"message": "\ud800"}),
        {"kind": "ProposedAction", "action_id": CHANGE, "args": {"x": math.inf}},
        NeedsHumanJudgment(question="ok?", context={"x": -math.inf}),
    ],
    ids=["nan", "too-deep", "lone-surrogate", "inf-as-json", "judgment-context"],
)
async def test_a_proposal_json_cannot_record_exactly_is_invoked_never(
    db: Path, outcome: Any
) -> None:
    """Attack: an executor proposes args holding ``NaN``, arrays nested 200 levels deep or
    a lone surrogate. Before, ``NaN`` was admitted, invoked as ``NaN`` and recorded as
    ``null`` (the audit trail said otherwise than what ran), and a surrogate crashed the
    run with a serializer error. Promise: the run stops with ``error`` naming the value's
    path, nothing is invoked and nothing is appended."""
    cases = CaseStore(SqliteEventStore(str(db)))
    await open_case(cases)
    before = await types(cases)
    port = ScriptedPort()
    executor, _ = scripted(outcome)
    report = await make_runtime(cases, [port]).run_until_blocked("case-1", executor)
    assert report.reason == "error", report
    assert "JSON" in report.message and report.invoked == ()
    assert port.invocations == []
    assert await types(cases) == before


class BarrierAuthority(AuthorityProvider):
    """Grants everything, once both runners are inside their recheck (so both have read
    the case before either appends)."""

    def __init__(self, barrier: asyncio.Barrier) -> None:
        self.barrier = barrier

    async def authorize(
        self, commission: Commission[Assigned], query: AuthorityQuery
    ) -> AuthorityDecision:
        await asyncio.wait_for(self.barrier.wait(), 10)
        return Granted(by="barrier")


async def test_two_runners_racing_one_proposal_invoke_it_once(db: Path) -> None:
    """Attack: two runners (two stores over one SQLite file, as two processes) step the same
    case at once; both executors propose the same action and both rechecks pass before
    either records its admission. Promise: one admission lands and one invocation happens;
    the other runner stops ``superseded`` having invoked nothing."""
    first, second = CaseStore(SqliteEventStore(str(db))), CaseStore(SqliteEventStore(str(db)))
    await open_case(first)
    barrier = asyncio.Barrier(2)
    ports = [ScriptedPort(), ScriptedPort()]
    proposal = ProposedAction(action_id=CHANGE, args={"message": "fix"})
    runs = [
        make_runtime(cases, [port], BarrierAuthority(barrier), max_iterations=1)
        for cases, port in zip((first, second), ports, strict=True)
    ]
    reports = await asyncio.gather(
        *(rt.run_until_blocked("case-1", scripted(proposal)[0]) for rt in runs)
    )
    invoked = [len(p.invocations) for p in ports]
    assert sorted(invoked) == [0, 1], invoked
    loser = reports[invoked.index(0)]
    assert loser.reason == "superseded" and loser.performed == ()
    history = await types(first)
    assert history.count("RequestAdmitted") == 1 and history.count("EffectPerformed") == 1
    assert (await first.load("case-1")).revision == 1


class BrokenAuthority(AuthorityProvider):
    async def authorize(
        self, commission: Commission[Assigned], query: AuthorityQuery
    ) -> AuthorityDecision:
        raise RuntimeError("the grants database is down")


async def test_an_authority_provider_that_fails_is_a_denial(db: Path) -> None:
    """Attack: the authority provider raises (down, or made to fail). Promise: the proposal
    is refused and recorded as such, never invoked (a failing check grants nothing)."""
    cases = CaseStore(SqliteEventStore(str(db)))
    await open_case(cases)
    port = ScriptedPort()
    executor, _ = scripted(ProposedAction(action_id=CHANGE, args={}), NoUsefulAction())
    report = await make_runtime(cases, [port], BrokenAuthority()).run_until_blocked(
        "case-1", executor
    )
    assert port.invocations == []
    assert [(r.by, r.reason) for r in report.refusals] == [("runtime", "authority_denied")]
    assert "RequestRefused" in await types(cases)
    assert (await cases.load("case-1")).revision == 0


async def test_resolving_a_request_that_is_not_open_changes_nothing(db: Path) -> None:
    """Attack: an operator call settling a request id that was never admitted, or one
    already performed. Promise: ``CommissionError``, and the case is unchanged."""
    cases = CaseStore(SqliteEventStore(str(db)))
    await open_case(cases)
    port = ScriptedPort()
    runtime = make_runtime(cases, [port])
    done = Performed(what="forged", ref="x")
    with pytest.raises(CommissionError):
        await runtime.resolve("case-1", "case-1:0:1", done)
    executor, _ = scripted(ProposedAction(action_id=CHANGE, args={}), NoUsefulAction())
    await runtime.run_until_blocked("case-1", executor)
    settled = await types(cases)
    with pytest.raises(CommissionError):
        await runtime.resolve("case-1", "case-1:0:1", done)  # performed already
    assert await types(cases) == settled
    assert (await cases.load("case-1")).revision == 1 and len(port.invocations) == 1
