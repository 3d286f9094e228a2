"""JSON is exact on every event store: a number JSON cannot hold is refused, never changed.

``1e400`` parses as infinity; stored through the event models it would come back as
``null``. Every boundary refuses it instead: start input and resume payload (the caller's
error, nothing written), verdict output (the verdict is refused, the step stays in doubt),
effect output (the step fails for good with ``invalid_output``, the effect is not invoked
again) and flow output (the execution fails with ``invalid_output``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.app import Retry
from loom.errors import EffectFailedError, InvalidPayloadError, VerdictError
from loom.runtime import Runtime
from loom.store import AppendRequest, EventStore
from loom.wire import ExecutionPackage

app = Loom("exact-json")
calls: Counter[str] = Counter()
NON_FINITE: list[Any] = [
    math.inf,
    -math.inf,
    math.nan,
    json.loads("1e400"),
    {"x": json.loads("-1e400")},
    [1, {"deep": [math.nan]}],
]


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    calls.clear()


@app.effect("returns", retry=Retry(max_attempts=3, initial_interval=0))
async def returns(ctx: EffectContext, value: Any) -> Any:
    calls[ctx.idempotency_key] += 1
    return NON_FINITE[value["give"]]


@app.effect("charge", idempotent=False, retry=Retry(max_attempts=3, initial_interval=0))
async def charge(ctx: EffectContext, value: Any) -> Any:
    calls[ctx.idempotency_key] += 1
    return NON_FINITE[value["give"]]


@app.flow("call")
async def call(ctx: FlowContext, value: dict[str, Any]) -> Any:
    effect = charge if value.get("charge") else returns
    try:
        return await ctx.execute(effect, {"give": value["give"]})
    except EffectFailedError as exc:
        return {"caught": exc.error_code, "step": exc.step_id}


@app.flow("gate")
async def gate(ctx: FlowContext, value: Any) -> Any:
    return await ctx.suspend(on="go", correlation_key="k")


@app.flow("give")
async def give(ctx: FlowContext, index: int) -> Any:
    return NON_FINITE[index]


def numbers() -> list[Any]:
    """Fresh copies (NaN compares unequal, so tests check the error, not the value)."""
    return list(NON_FINITE)


@pytest.mark.parametrize("bad", numbers(), ids=range(len(NON_FINITE)))
async def test_a_start_input_is_refused_and_nothing_is_written(store: EventStore, bad: Any) -> None:
    rt = Runtime(app, store)
    with pytest.raises(InvalidPayloadError) as info:
        await rt.start("gate", {"v": bad}, execution_id="s-1")
    assert info.value.code == "non_finite_number"
    assert info.value.details["path"].startswith("$.v")
    assert await store.list() == []


@pytest.mark.parametrize("bad", numbers(), ids=range(len(NON_FINITE)))
async def test_a_resume_payload_is_refused_and_the_log_is_unchanged(
    store: EventStore, bad: Any
) -> None:
    rt = Runtime(app, store)
    await rt.start("gate", None, execution_id="r-1")
    before = await rt.history("r-1")
    with pytest.raises(InvalidPayloadError, match="non-finite"):
        await rt.resume("r-1", "go", "k", {"v": bad})
    assert await rt.history("r-1") == before
    done = await rt.resume("r-1", "go", "k", {"v": 1e308})  # the gate is still open
    assert done.status == "completed" and done.output == {"v": 1e308}


@pytest.mark.parametrize("charge_it", [False, True], ids=["idempotent", "non-idempotent"])
@pytest.mark.parametrize("index", range(len(NON_FINITE)))
async def test_an_effect_output_fails_the_step_once_and_for_good(
    store: EventStore, index: int, charge_it: bool
) -> None:
    rt = Runtime(app, store)
    done = await rt.start("call", {"give": index, "charge": charge_it}, execution_id="e-1")
    assert done.status == "completed", done.error
    assert done.output == {"caught": "invalid_output", "step": "1"}
    assert calls["e-1:1"] == 1  # the effect ran once; its retries were not used
    failed = [e for e in await rt.history("e-1") if isinstance(e, ev.EffectFailed)]
    assert [f.error.code for f in failed] == ["invalid_output"]
    assert "non-finite" in failed[0].error.message
    # Replayed from the log (a fresh runtime), the flow sees the same failure, no call.
    replayed = await Runtime(app, store).result("e-1")
    assert replayed.output == done.output and calls["e-1:1"] == 1


@pytest.mark.parametrize("index", range(len(NON_FINITE)))
async def test_a_flow_output_fails_the_execution_with_a_clear_code(
    store: EventStore, index: int
) -> None:
    rt = Runtime(app, store)
    done = await rt.start("give", index, execution_id="f-1")
    assert done.status == "failed"
    assert done.error is not None and done.error["code"] == "invalid_output"
    assert "non-finite" in done.error["message"]
    assert all(not isinstance(e, ev.ExecutionCompleted) for e in await rt.history("f-1"))


@pytest.mark.parametrize("bad", numbers(), ids=range(len(NON_FINITE)))
async def test_a_verdict_output_is_refused_and_the_step_stays_in_doubt(
    store: EventStore, bad: Any
) -> None:
    rt = Runtime(app, store)
    await store.create(ev.ExecutionStarted(execution_id="v-1", flow="call", input={"give": 1}))
    intent: list[ev.Event] = [
        ev.EffectStarted(step_id="1", effect="returns", idempotency_key="v-1:1")
    ]
    ev.number(intent, 1, 1.0)
    await store.append(AppendRequest("v-1", 1, intent))
    parked = await rt.execute(ExecutionPackage(execution_id="v-1"))
    assert parked.status == "in_doubt"
    with pytest.raises(VerdictError) as info:
        await rt.verdict("v-1", "1", "performed", output=bad)
    assert info.value.code == "invalid_output"
    assert (await rt.result("v-1")).status == "in_doubt"
    done = await rt.verdict("v-1", "1", "performed", output=2.5)
    assert done.status == "completed" and done.output == 2.5
