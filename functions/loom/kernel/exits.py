"""Flow or effect code that raises ``SystemExit`` or ``KeyboardInterrupt`` in an execute call.

asyncio lets those two out of a task and out of the event loop itself: in a served worker
the loop every request runs on would stop, and every later request would wait forever
while the process still answers ``/live``. So they are turned into an abort where user code
raised them: the execute call unwinds as after a store failure (nothing more recorded, as
if its worker had died there) and fails with :class:`~loom.errors.ExitRequestedError`,
which names the code that raised. The next execute call carries on from the log.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from loom.errors import ExitRequestedError
from loom.kernel.context import AbortSignal

T = TypeVar("T")

EXITS = (KeyboardInterrupt, SystemExit)


def exit_signal(exc: BaseException, where: str) -> AbortSignal:
    """The abort for ``exc`` (one of :data:`EXITS`) raised by ``where`` (who raised it)."""
    error = ExitRequestedError(
        f"{where} raised {type(exc).__name__}({exc}); the execute call stopped there as "
        "if its worker had died, and the next one carries on from the log",
        details={"raised": type(exc).__name__},
    )
    return AbortSignal(error)


async def guarded(flow: Coroutine[Any, Any, T], name: str) -> T:
    """Await the flow coroutine ``flow`` (of flow ``name``), turning an exit into an abort."""
    try:
        return await flow
    except EXITS as exc:
        raise exit_signal(exc, f"flow {name!r}") from exc
