"""Temporal's data-converter, workflow-id and failure scenarios, ported to Loom.

Large payloads, unicode, odd JSON values (NaN, big integers, deep nesting), what a workflow's
own exception does, and a second start with the same workflow id (Temporal's id reuse
policies). SQLite on disk with a file blob store, every execute call checked by a replay.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from loom import EffectContext, EffectFailedError, FlowContext, Loom
from loom.errors import ExecutionConflictError, InputError, InvalidExecutionIdError
from tests.peers.temporal.harness import EnvFactory


class InsufficientFundsError(Exception):
    """A user's own error type."""


def data_app(calls: list[str]) -> Loom:
    app = Loom("temporal-data")

    @app.effect("echo")
    def echo(ctx: EffectContext, value: Any) -> Any:
        calls.append(ctx.idempotency_key)
        return value

    @app.effect("nan")
    def nan(ctx: EffectContext, _: None) -> float:
        calls.append(ctx.idempotency_key)
        return math.nan

    @app.flow("echo_flow")
    async def echo_flow(ctx: FlowContext, value: Any) -> Any:
        return await ctx.execute(echo, value)

    @app.flow("nan_step")
    async def nan_step(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.execute(nan)
        except EffectFailedError as exc:
            return exc.details["error_code"]
        return "stored"

    @app.flow("raises")
    async def raises(ctx: FlowContext, kind: str) -> None:
        await ctx.execute(echo, "before")
        if kind == "custom":
            raise InsufficientFundsError("balance 5 < 10")
        try:
            {}["k"]
        except KeyError as exc:
            raise RuntimeError("wrapped") from exc

    @app.flow("returns_nan")
    async def returns_nan(ctx: FlowContext, _: None) -> float:
        return math.inf

    @app.flow("waits")
    async def waits(ctx: FlowContext, value: Any) -> Any:
        got = await ctx.suspend("go", ctx.execution_id)
        return [value, got]

    return app


async def test_a_large_payload_round_trips_through_the_blob_store(make_env: EnvFactory):
    """Temporal: large payloads (up to the 2 MB blob limit) pass through input, activity and
    result. Loom: a 3 MB value goes to the blob store (the event keeps a reference) and
    comes back byte for byte, live and on replay."""
    calls: list[str] = []
    env = make_env(data_app(calls))
    big = {"blob": "é" * 1_500_000, "n": 1}
    r = await env.start("echo_flow", big, execution_id="big")
    assert r.status == "completed" and r.output == big
    assert (await env.runtime.result("big")).output == big


@pytest.mark.parametrize(
    "value",
    [
        "héllo wörld ✓ 漢字 🎉 مرحبا",
        {"nested": {"deeper": [[[{"x": None}]], [True, False]], "empty": {}, "list": []}},
        2**100,
        -(2**70) + 1,
        1e308,
        0.1 + 0.2,
        ["\u0000 nul", "tab\tnewline\n", "\\backslash", '"quote"'],
        {"$blob": "looks like a reference"},
        None,
    ],
    ids=[
        "unicode",
        "nested",
        "bigint",
        "negbigint",
        "hugefloat",
        "float",
        "escapes",
        "blob",
        "none",
    ],
)
async def test_odd_json_values_round_trip_exactly(make_env: EnvFactory, value: Any):
    """Temporal: the JSON converter round-trips unicode, nested values, big ints (as
    Python ints) and escapes. Loom records values exactly (docs/adr/0016): the same value
    comes back from the step and as the flow's result."""
    env = make_env(data_app([]))
    r = await env.start("echo_flow", value, execution_id="odd")
    assert r.status == "completed"
    assert r.output == value and type(r.output) is type(value)


async def test_a_non_finite_number_is_refused_never_stored_as_null(make_env: EnvFactory):
    """Temporal: the JSON converter writes NaN as a non-standard token. Loom refuses a
    number JSON cannot hold: a start input is refused with nothing written; an effect's
    NaN output fails its step (``invalid_output``) without invoking it again; a flow's
    infinite result fails the execution."""
    calls: list[str] = []
    env = make_env(data_app(calls))
    with pytest.raises(InputError):
        await env.start("echo_flow", {"x": math.nan}, execution_id="n1")
    assert await env.runtime.list() == []
    r = await env.start("nan_step", None, execution_id="n2")
    assert (r.status, r.output) == ("completed", "invalid_output")
    assert calls == ["n2:1"]
    bad = await env.start("returns_nan", None, execution_id="n3")
    assert bad.status == "failed"


async def test_unicode_execution_ids_and_bad_ids(make_env: EnvFactory):
    """Temporal accepts any string up to 1000 bytes as a workflow id. Loom keeps ids of
    any script byte for byte, and refuses ids with ``/``, control characters or edge
    spaces with ``InvalidExecutionIdError`` naming the rule, nothing written."""
    env = make_env(data_app([]))
    for eid in ("訂單-42", "order: 7 ✓", "ü" * 100):
        r = await env.start("echo_flow", eid, execution_id=eid)
        assert (r.execution_id, r.output) == (eid, eid)
    for bad in ("a/b", " lead", "x\n", ""):
        with pytest.raises(InvalidExecutionIdError):
            await env.start("echo_flow", 1, execution_id=bad)


async def test_an_exception_raised_by_the_workflow_fails_it_with_type_and_message(
    make_env: EnvFactory,
):
    """Temporal: an ``ApplicationError`` (or a configured failure type) fails the workflow;
    any other exception fails the workflow *task*, retried until the code is fixed. Loom
    deliberately fails the execution on any exception the flow raises, recording its type
    and message; the cause chain is not recorded."""
    calls: list[str] = []
    env = make_env(data_app(calls))
    r = await env.start("raises", "custom", execution_id="e1")
    assert r.status == "failed" and r.error is not None
    assert r.error["type"] == "InsufficientFundsError"
    assert "balance 5 < 10" in r.error["message"]
    chained = await env.start("raises", "chained", execution_id="e2")
    assert chained.error is not None and chained.error["type"] == "RuntimeError"
    assert calls == ["e1:1", "e2:1"]  # the step before the failure ran once each


async def test_a_second_start_with_the_same_id_is_the_same_execution(make_env: EnvFactory):
    """Temporal: starting a workflow id that is running raises WorkflowAlreadyStartedError
    (id conflict policy FAIL); the default reuse policy allows a new run once it closed.
    Loom deliberately makes a start idempotent by id: the same flow and input report the
    existing execution (running or ended) and run nothing again; another input under the
    id is ``ExecutionConflictError``; a finished id is never started again."""
    calls: list[str] = []
    env = make_env(data_app(calls))
    first = await env.start("waits", "v", execution_id="dup")
    again = await env.start("waits", "v", execution_id="dup")
    assert first.status == again.status == "suspended"
    with pytest.raises(ExecutionConflictError):
        await env.start("waits", "other", execution_id="dup")
    with pytest.raises(ExecutionConflictError):
        await env.start("echo_flow", "v", execution_id="dup")
    await env.runtime.resume("dup", "go", "dup", 1)
    after = await env.start("waits", "v", execution_id="dup")
    assert (after.status, after.output) == ("completed", ["v", 1])
    done = await env.start("echo_flow", "x", execution_id="once")
    assert done.output == "x"
    assert (await env.start("echo_flow", "x", execution_id="once")).output == "x"
    assert calls == ["once:1"]  # the second start ran nothing


async def test_big_integers_survive_reports_and_snapshots(make_env: EnvFactory):
    """Temporal's JSON converter round-trips Python ints of any size. Loom's reports and
    snapshots went through a JSON library limited to 64 bits: a flow input or result of
    ``2**100`` made the start, and every later read of the execution, raise ``TypeError``,
    and a snapshot would have read it back as a float. Now exact, from a snapshot too."""
    env = make_env(data_app([]), snapshot_min_tail=0)  # a snapshot at every suspension
    r = await env.start("waits", 2**100, execution_id="bs")
    assert r.status == "suspended"
    state = await env.runtime.load_state("bs")  # folded from the snapshot
    assert state.input == 2**100 and type(state.input) is int
    done = await env.runtime.resume("bs", "go", "bs", -(2**90))
    assert done.output == [2**100, -(2**90)]
    assert (await env.runtime.result("bs")).output == [2**100, -(2**90)]


async def test_the_test_env_replays_a_result_held_in_the_blob_store():
    """Temporal's test environment runs workflows with large results like any other.
    ``loom.testing.LoomTestEnv`` (in memory, the helper users test with) replays every
    execute call; a result over the blob threshold was compared as its blob reference and
    reported as a nondeterminism. The replay now reads the result back as the run does."""
    from loom.testing import LoomTestEnv

    env = LoomTestEnv(data_app([]))
    big = {"blob": "x" * 300_000}
    r = await env.start("echo_flow", big, execution_id="L")
    assert (r.status, r.output) == ("completed", big)
    escaped = await env.start("echo_flow", {"$blob": "mine"}, execution_id="E")
    assert escaped.output == {"$blob": "mine"}
