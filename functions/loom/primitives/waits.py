"""Waiting for an execution's log to grow, at the cost of a summary read per look.

A caller waiting for something a flow will record (an update's answer, a stream's next
value) must not fold the execution's state again and again: forty such waiters on a big
execution starved a process. It looks at the summary's last seq instead (one small read),
first after :data:`FIRST` seconds and then ever less often, at least every :data:`EVERY`
seconds, and loads the state only once the log has grown.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

__all__ = ["EVERY", "FIRST", "log_grew"]

FIRST: Final = 0.05
EVERY: Final = 0.5


async def log_grew(rt: Runtime, execution_id: str, seen: int, deadline: float) -> bool:
    """Wait until the log of ``execution_id`` ends past ``seen``, or the loop's clock reaches
    ``deadline``; whether it grew."""
    loop = asyncio.get_running_loop()
    pause = FIRST
    while True:
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, EVERY)
        if (await rt.store.summary(execution_id)).last_seq != seen:
            return True
