"""A flow's ``ctx`` used where it does not belong fails with ``ContextMisuseError``.

A ctx kept in a global or a closure can reach code it was not given to: after its flow
ended, outside any flow, or inside the flow of another execution. There, a step would be
recorded in the first execution's log but numbered from the second one's task, and an
ended execution's ctx failed with an ``AttributeError``. Each case now raises
``ContextMisuseError`` (a ``LoomError`` and, as before, a ``RuntimeError``) naming what was
wrong, and nothing is appended to either log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import ContextMisuseError, LoomError
from loom.runtime import Runtime
from loom.store import SqliteEventStore

app = Loom("misuse")
KEPT: list[FlowContext] = []
RELEASE: list[asyncio.Event] = []


@app.effect("echo")
async def echo(ctx: EffectContext, n: int) -> int:
    return n


@app.effect("held")
async def held(ctx: EffectContext, n: int) -> int:
    RELEASE[1].set()  # the keeper is running: its ctx is kept
    await RELEASE[0].wait()
    return n


@app.flow("keeper")
async def keeper(ctx: FlowContext, hold: bool) -> int:
    KEPT.append(ctx)
    return await ctx.execute(held if hold else echo, 1)


@app.flow("borrower")
async def borrower(ctx: FlowContext, how: str) -> str:
    other = KEPT[0]
    calls: dict[str, Any] = {
        "execute": lambda: other.execute(echo, 2),
        "sleep": lambda: other.sleep(1),
        "now": lambda: other.now(),
        "patched": lambda: other.patched("change-1"),
    }
    try:
        made = calls[how]()
        if asyncio.iscoroutine(made):
            await made
    except ContextMisuseError as exc:
        return str(exc)
    finally:
        if RELEASE:
            RELEASE[0].set()
    return "no error"


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    KEPT.clear()
    RELEASE.clear()
    return Runtime(app, SqliteEventStore(tmp_path / "l.db"))


@pytest.mark.parametrize("how", ["execute", "sleep", "now", "patched"])
async def test_the_ctx_of_an_ended_execution_inside_another_flow(runtime: Runtime, how: str):
    await runtime.start("keeper", False, execution_id="a")
    before = len(await runtime.history("a"))
    done = await runtime.start("borrower", how, execution_id="b")
    assert done.status == "completed"
    assert done.output == (
        "the ctx of execution 'a' was awaited inside the flow of execution 'b': a flow "
        "uses only the ctx it was given"
    )
    assert len(await runtime.history("a")) == before


async def test_the_ctx_of_a_running_execution_inside_another_flow_records_nothing_there(
    runtime: Runtime,
):
    """Both executions run at once: the borrowed ctx's session is alive, and before the
    check the step went into its log as step ``1`` of the other flow's numbering."""
    RELEASE.extend([asyncio.Event(), asyncio.Event()])
    first = asyncio.create_task(runtime.start("keeper", True, execution_id="a"))
    await RELEASE[1].wait()
    second = await runtime.start("borrower", "execute", execution_id="b")
    assert "the ctx of execution 'a'" in second.output
    assert (await first).output == 1
    steps = [e for e in await runtime.history("a") if e.type == "EffectCompleted"]
    assert [(e.step_id, e.output) for e in steps] == [("1", 1)]  # type: ignore[attr-defined]


async def test_a_ctx_outside_any_flow(runtime: Runtime):
    await runtime.start("keeper", False, execution_id="a")
    with pytest.raises(ContextMisuseError, match="inside the flow that owns ctx") as caught:
        await KEPT[0].execute(echo, 3)
    assert isinstance(caught.value, LoomError) and isinstance(caught.value, RuntimeError)
    with pytest.raises(ContextMisuseError):
        KEPT[0].uuid()
