"""Helpers of the console's operator tests: parking an execution the way a divergent
replay or a crash loop does, and reading a log back."""

from __future__ import annotations

import asyncio
from typing import Any

from loom import events as ev
from loom.kernel.decide import Decision, write
from loom.kernel.fold import ExecutionState
from loom.runtime import Runtime
from loom.store.base import StatusChange


def park(runtime: Runtime, execution_id: str, reason: str) -> None:
    """Park ``execution_id`` with ``reason`` (an ``ExecutionParked`` in its log)."""

    def decide(_: ExecutionState) -> Decision:
        return Decision(
            [ev.ExecutionParked(reason=reason)], StatusChange("suspended", None, reason)
        )

    async def go() -> None:
        await write(runtime, await runtime.load_state(execution_id), decide)

    asyncio.run(go())


def log_of(runtime: Runtime, execution_id: str) -> list[Any]:
    """Every event of ``execution_id``."""
    return asyncio.run(runtime.history(execution_id))
