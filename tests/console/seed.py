"""Putting executions of the shop app into each state the console shows, through the store
and the runtime (what a crash, an operator and the flows themselves would leave)."""

from __future__ import annotations

import time
from typing import Any

from loom import events as ev
from loom.runtime import Runtime
from loom.store.base import AppendRequest, StatusChange
from loom.wire import ExecutionPackage, ExecutionResult

SHOP_REF = "tests.console.shop:app"


async def crash_after_intent(runtime: Runtime, execution_id: str, order: dict[str, Any]) -> None:
    """A checkout whose worker died right after the charge's intent record: the log holds
    ``EffectStarted`` for step 1 and no outcome (the next execute call parks it in doubt)."""
    await runtime.start("checkout", order, execution_id=execution_id, run=False)
    intent = ev.EffectStarted(
        step_id="1",
        effect="payments.charge",
        attempt=1,
        idempotency_key=f"{execution_id}:1",
        seq=2,
        at=time.time(),
    )
    await runtime.store.append(AppendRequest(execution_id, 1, [intent], StatusChange("running")))


async def in_doubt(runtime: Runtime, execution_id: str, order: dict[str, Any]) -> ExecutionResult:
    """A checkout parked in doubt on its charge (step 1)."""
    await crash_after_intent(runtime, execution_id, order)
    result = await runtime.execute(ExecutionPackage(execution_id=execution_id))
    assert result.status == "in_doubt", result
    return result


async def claimed(runtime: Runtime, execution_id: str, holder: str) -> None:
    """An echo execution a worker claimed (and is still running, as far as the log says)."""
    await runtime.start("echo", {"n": 1}, execution_id=execution_id, run=False)
    claim = ev.ExecutionClaimed(holder=holder, until=time.time() + 300, seq=2, at=time.time())
    await runtime.store.append(AppendRequest(execution_id, 1, [claim]))
