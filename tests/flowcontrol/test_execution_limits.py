"""Limits per execution at their edges (``loom.kernel.execution_limits``), on SQLite and Firestore.

Each limit is reached exactly: one below it everything runs, at it the refusal is clear and
nothing is half-written (no intent record without its outcome, no child or message made
and not recorded, nothing appended by a refused call).
"""

from __future__ import annotations

from typing import Any

import pytest

from loom import EffectContext, FlowContext, Limits, Loom
from loom import events as ev
from loom.errors import (
    ConfigurationError,
    InputError,
    LimitExceededError,
    MailboxFullError,
    NotPermittedError,
    UnknownExecutionError,
)
from loom.grants import GrantPolicy, GrantRule
from loom.kernel.execution_limits import DEFAULT_LIMITS
from loom.runtime import Runtime
from loom.store import EventStore

INVOKED: list[str] = []


def limits_app(grants: GrantPolicy | None = None) -> Loom:
    app = Loom("limits", grants=grants, limits=Limits(max_children=2))

    @app.effect("lim.tick")
    async def tick(ctx: EffectContext, n: int) -> int:
        INVOKED.append(ctx.idempotency_key)
        return n

    @app.effect("lim.pay", idempotent=False)
    async def pay(ctx: EffectContext, n: int) -> int:
        INVOKED.append(ctx.idempotency_key)
        return n

    @app.flow("lim.forever")
    async def forever(ctx: FlowContext, n: int) -> None:
        while True:
            n = await ctx.execute(pay if n % 2 else tick, n + 1)

    @app.flow("lim.again", limits=Limits(max_runs=3))
    async def again(ctx: FlowContext, n: int) -> int:
        await ctx.execute(tick, n)
        await ctx.continue_as_new(n + 1)
        return n

    @app.flow("lim.child")
    async def child(ctx: FlowContext, n: int) -> int:
        return n

    @app.flow("lim.parent")
    async def parent(ctx: FlowContext, n: int) -> list[Any]:
        got: list[Any] = []
        for i in range(n):
            try:
                got.append(await ctx.execute_flow(child, i))
            except LimitExceededError as exc:
                got.append(exc.code)
        return got

    @app.flow("lim.deaf")
    async def deaf(ctx: FlowContext, n: int) -> None:
        await ctx.suspend("never", ctx.execution_id)

    @app.flow("lim.sender")
    async def sender(ctx: FlowContext, to: str) -> str:
        try:
            await ctx.send(to, "noise", 1)
        except MailboxFullError as exc:
            return exc.code
        return "sent"

    return app


def _types(events: list[ev.Event]) -> list[str]:
    return [e.type for e in events]


async def test_a_flow_that_never_stops_fails_at_max_events_with_every_outcome_recorded(
    store: EventStore,
):
    INVOKED.clear()
    rt = Runtime(limits_app(), store)
    done = await rt.start("lim.forever", 0, execution_id="f-1", budgets={"max_events": 30})
    assert (done.status, done.error and done.error["code"]) == ("failed", "limit_exceeded")
    assert "max_events=30" in done.error["message"]  # type: ignore[index]
    events = await rt.history("f-1")
    assert 30 <= len(events) <= 33  # the end (and a claim) are recorded past it
    # Every effect that ran has its outcome in the log; no intent is left open.
    outcomes = [e for e in events if isinstance(e, ev.EffectCompleted)]
    assert len(outcomes) == len(INVOKED)
    intents = {e.step_id for e in events if isinstance(e, ev.EffectStarted)}
    assert intents <= {e.step_id for e in outcomes}
    # One event more room, one step more: the limit is where it says.
    ran = len(INVOKED)
    INVOKED.clear()
    more = await rt.start("lim.forever", 0, execution_id="f-2", budgets={"max_events": 31})
    assert more.status == "failed" and len(INVOKED) == ran + 1


async def test_continue_as_new_past_max_runs_fails_the_execution(store: EventStore):
    rt = Runtime(limits_app(), store)
    done = await rt.start("lim.again", 1, execution_id="a-1")
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "limit_exceeded" and "max_runs=3" in done.error["message"]
    events = await rt.history("a-1")
    assert [e.run for e in events if isinstance(e, ev.ExecutionContinued)] == [2, 3]
    # The start may ask for fewer runs (anyone may lower a limit).
    low = await rt.start("lim.again", 1, execution_id="a-2", budgets={"max_runs": 1})
    assert low.status == "failed"
    assert not [e for e in await rt.history("a-2") if isinstance(e, ev.ExecutionContinued)]


async def test_a_child_past_max_children_fails_in_the_flow_and_is_never_made(store: EventStore):
    rt = Runtime(limits_app(), store)
    done = await rt.start("lim.parent", 4, execution_id="p-1")
    assert done.status == "completed"
    assert done.output == [0, 1, "limit_exceeded", "limit_exceeded"]
    for made in ("p-1.child.1", "p-1.child.2"):
        assert (await rt.result(made)).status == "completed"
    for refused in ("p-1.child.3", "p-1.child.4"):
        with pytest.raises(UnknownExecutionError):
            await rt.require(refused)
    # A replay raises the recorded refusal again, without asking the store.
    state = await rt.load_state("p-1")
    assert [rec.get("status") for sid, rec in sorted(state.steps.items())][-2:] == [
        "failed",
        "failed",
    ]


async def test_a_run_holding_max_messages_refuses_the_next_and_writes_nothing(
    store: EventStore,
):
    rt = Runtime(limits_app(), store)
    await rt.start("lim.deaf", 0, execution_id="d-1", budgets={"max_messages": 3})
    for n in range(3):
        await rt.send("d-1", "noise", n, message_id=f"m{n}")
    before = await rt.history("d-1")
    with pytest.raises(MailboxFullError) as refused:
        await rt.send("d-1", "noise", 3, message_id="m3")
    assert refused.value.details == {"limit": "max_messages", "value": 3, "used": 3}
    assert await rt.history("d-1") == before
    await rt.send("d-1", "noise", 2, message_id="m2")  # a repeat of a held one is a no-op
    # From a flow, the refusal is the sending step's, recorded: the flow may handle it.
    sent = await rt.start("lim.sender", "d-1", execution_id="s-1")
    assert (sent.status, sent.output) == ("completed", "mailbox_full")
    assert await rt.history("d-1") == before


async def test_a_buffered_resume_needs_room_in_the_log(store: EventStore):
    rt = Runtime(limits_app(), store)
    await rt.start("lim.deaf", 0, execution_id="r-1", budgets={"max_events": 4})
    for n in range(10):
        try:
            await rt.resume("r-1", "early", f"k{n}")
        except LimitExceededError as exc:
            assert exc.details["limit"] == "max_events"
            break
    else:
        raise AssertionError("the log never filled")
    before = await rt.history("r-1")
    with pytest.raises(LimitExceededError):
        await rt.resume("r-1", "early", "another")
    assert await rt.history("r-1") == before
    # The gate the flow waits on still opens: the flow can end instead of hanging.
    woken = await rt.resume("r-1", "never", "r-1")
    assert woken.status == "completed"


async def test_raising_a_limit_needs_the_grant_policy(store: EventStore):
    rule = GrantRule("ops", "lim.*", limits={"max_events": 100_000})
    rt = Runtime(limits_app(GrantPolicy([rule])), store)
    high = {"max_events": DEFAULT_LIMITS.max_events + 1}  # type: ignore[operator]
    with pytest.raises(NotPermittedError) as refused:
        await rt.start("lim.child", 1, execution_id="g-1", budgets=high, by="eve")
    assert refused.value.details["denied_limits"] == ["max_events"]
    assert (await rt.start("lim.child", 1, execution_id="g-2", budgets=high, by="ops")).status
    too_high = {"max_events": 100_001}
    with pytest.raises(NotPermittedError):
        await rt.start("lim.child", 1, execution_id="g-3", budgets=too_high, by="ops")
    # Lower is anyone's; the process's own code (no principal) may set anything.
    assert await rt.start("lim.child", 1, execution_id="g-4", budgets={"max_events": 9}, by="eve")
    assert await rt.start("lim.child", 1, execution_id="g-5", budgets=too_high)
    for eid in ("g-1", "g-3"):
        with pytest.raises(UnknownExecutionError):
            await rt.require(eid)


@pytest.mark.parametrize(
    "asked",
    [
        {"max_event": 5},
        {"max_events": 0},
        {"max_events": 2.5},
        {"max_runs": True},
        {"max_attempts": -1},
    ],
)
async def test_a_bad_limit_is_refused_naming_it(store: EventStore, asked: dict[str, Any]):
    rt = Runtime(limits_app(), store)
    with pytest.raises(InputError) as refused:
        await rt.start("lim.child", 1, execution_id="b-1", budgets=asked)
    assert refused.value.code == "invalid_limit" and next(iter(asked)) in refused.value.message
    with pytest.raises(UnknownExecutionError):
        await rt.require("b-1")


def test_limits_and_grant_rules_refuse_nonsense_at_configuration():
    with pytest.raises(ConfigurationError, match="max_events"):
        Limits(max_events=0)
    with pytest.raises(ConfigurationError, match="limits"):
        GrantPolicy.from_json('{"grants": [{"principal": "p", "limits": {"max_runs": "9"}}]}')
    policy = GrantPolicy.from_json('{"grants": [{"principal": "p", "limits": {"max_runs": 9}}]}')
    assert policy.raisable("p", "any.flow", "max_runs") == 9
    assert policy.raisable("q", "any.flow", "max_runs") is None
