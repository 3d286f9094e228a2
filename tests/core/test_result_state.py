"""``ExecutionResult.state`` is built on first use: every way of looking at a result sees
what a result built at once would have shown (the wire, equality, copies, nested models)."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.kernel.fold import ExecutionState
from loom.runtime import Runtime
from loom.store import InMemoryEventStore
from loom.wire import ExecutionResult
from loom.workers.http_models import ExecutionView

app = Loom("lazy-state")


@app.effect("double")
async def double(ctx: EffectContext, n: int) -> int:
    return 2 * n


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.execute(double, i)
    ctx.now()
    if n > 2:
        await ctx.suspend("go", "k", timeout=60)
    return total


def _eager(state: ExecutionState) -> ExecutionResult:
    """The result as it was built before: ``state`` filled when the result is made."""
    return ExecutionResult.from_state(state, include_state=False).model_copy(
        update={"state": state.to_dict()}
    )


@pytest.fixture(params=[2, 3], ids=["completed", "suspended"])
async def state(request: pytest.FixtureRequest) -> ExecutionState:
    rt = Runtime(app, InMemoryEventStore())
    await rt.start("steps", request.param, execution_id="e1")
    return await rt.load_state("e1")


LOOKS: dict[str, Callable[[ExecutionResult], object]] = {
    "json": lambda r: r.model_dump_json(),
    "dump": lambda r: r.model_dump(),
    "attribute": lambda r: r.state,
    "repr": repr,
    "iter": lambda r: dict(r),
    "copy": lambda r: copy.copy(r).state,
    "deepcopy": lambda r: copy.deepcopy(r).state,
    "pickle": lambda r: pickle.loads(pickle.dumps(r)).model_dump(),
    "nested": lambda r: ExecutionView(execution=r).model_dump_json(),
    "unset": lambda r: r.model_dump(exclude_unset=True),
    "roundtrip": lambda r: ExecutionResult.model_validate_json(r.model_dump_json()),
}


@pytest.mark.parametrize("look", sorted(LOOKS))
async def test_every_look_at_a_result_sees_the_state_it_was_made_with(
    state: ExecutionState, look: str
) -> None:
    lazy = ExecutionResult.from_state(state)
    assert "state" not in lazy.__dict__  # not built yet: the cost is not paid up front
    assert LOOKS[look](lazy) == LOOKS[look](_eager(state))
    assert lazy.state["steps"] and lazy.state["decisions"]  # built, and not empty


async def test_a_result_equals_one_built_at_once_both_ways(state: ExecutionState) -> None:
    assert ExecutionResult.from_state(state) == _eager(state)
    assert _eager(state) == ExecutionResult.from_state(state)
    assert ExecutionResult.from_state(state) != ExecutionResult.from_state(
        state, include_state=False
    )


async def test_later_changes_to_the_folded_state_do_not_show(state: ExecutionState) -> None:
    lazy, status, seq = ExecutionResult.from_state(state), state.status, state.last_seq
    state.status, state.last_seq = "failed", 999
    assert (lazy.state["status"], lazy.state["last_seq"]) == (status, seq)


async def test_an_assigned_state_wins_over_the_unbuilt_one(state: ExecutionState) -> None:
    lazy = ExecutionResult.from_state(state)
    lazy.state = {"mine": 1}
    assert lazy.state == {"mine": 1}
    assert lazy.model_dump()["state"] == {"mine": 1}


async def test_without_state_nothing_is_kept_to_build(state: ExecutionState) -> None:
    result = ExecutionResult.from_state(state, include_state=False)
    assert result.state == {}
    assert result.model_dump()["state"] == {}
