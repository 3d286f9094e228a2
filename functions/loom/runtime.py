"""``Runtime``: runs the flows of one app over one event store.

The kernel's runtime (``loom.kernel.runtime``: start, execute, resume, verdict, cancel,
get, list) with the control calls of the primitives and operator tools installed with it:
messages, published values, queues' start option, forks.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from loom.kernel import runtime as kernel
from loom.ops.fork import fork as fork_from
from loom.primitives import messages, published, queues

if TYPE_CHECKING:
    from loom.primitives.queues import QueueRef
    from loom.reserved_ids import IdForm
    from loom.wire import ExecutionResult

__all__ = ["Runtime"]


class Runtime(kernel.Runtime):
    """Runs the flows of one :class:`~loom.app.Loom` app over one event store.

    See :class:`loom.kernel.runtime.Runtime` for the arguments and the kernel's calls.
    """

    async def start(  # type: ignore[override]
        self,
        flow: str,
        input: Any = None,
        *,
        execution_id: str | None = None,
        capabilities: set[str] | frozenset[str] | list[str] = frozenset(),
        budgets: dict[str, float] | None = None,
        run: bool = True,
        by: str | None = None,
        version: str | int | None = None,
        queue: QueueRef | None = None,
        timeout: float | timedelta | None = None,
        derived: IdForm | None = None,
    ) -> ExecutionResult:
        """Start ``flow``: :meth:`loom.kernel.runtime.Runtime.start`, on ``queue`` if given
        (a declared queue and partition key, :mod:`loom.primitives.queues`).

        Raises:
            InputError: ``queue`` is not declared.
        """
        return await super().start(
            flow,
            input,
            execution_id=execution_id,
            capabilities=capabilities,
            budgets=budgets,
            run=run,
            by=by,
            version=version,
            timeout=timeout,
            fields=queues.started_fields(self.app, queue) if queue is not None else None,
            derived=derived,
        )

    async def send(
        self, execution_id: str, topic: str, payload: Any = None, **kw: Any
    ) -> ExecutionResult:
        """Deliver a message on ``topic`` and run the receiver (``message_id``, ``by``: see
        :func:`loom.primitives.messages.send_from_outside`)."""
        return await messages.send_from_outside(self, execution_id, topic, payload, **kw)

    async def get_event(self, execution_id: str, key: str, timeout: float = 0.0) -> Any:
        """The value published under ``key``, waiting up to ``timeout`` s (loom.primitives.published)."""
        return await published.get_event(self, execution_id, key, timeout=timeout)

    fork = fork_from  # a new execution reusing a recorded prefix (loom.ops.fork)
