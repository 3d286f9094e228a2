"""``Runtime``: runs the flows of one app over one event store.

The kernel's runtime (``loom.kernel.runtime``: start, execute, resume, verdict, cancel,
get, list) with the control calls of the primitives and operator tools installed with it:
messages, published values, queues' start option, forks, bulk operations.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from loom.errors import InputError
from loom.kernel import runtime as kernel
from loom.ops.bulk import bulk as bulk_operation
from loom.ops.fork import fork as fork_from
from loom.primitives import (
    messages,
    published,
    queries,
    queue_options,
    queues,
    streams,
    update_calls,
)
from loom.primitives.schedule_admin import Schedules

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from loom.primitives.queues import QueueRef
    from loom.primitives.streams import StreamChunk
    from loom.primitives.update_calls import UpdateOutcome
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
        (a declared queue, a partition key and options, :mod:`loom.primitives.queues`).

        Raises:
            InputError: ``queue`` is not declared, or one of its options is bad.
            QueueDeduplicatedError: The queue's deduplication id is held by a queued or
                running execution (:mod:`loom.primitives.queue_options`).
        """
        fields = queues.started_fields(self.app, queue, self.clock()) if queue else None
        dedup = queue.deduplication_id if queue is not None else None
        if queue is not None and dedup is not None:
            execution_id = execution_id or str(uuid.uuid4())
            held = await queue_options.hold_dedup(self, queue.name, dedup, execution_id)
        else:
            held = False
        try:
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
                fields=fields,
                derived=derived,
            )
        except InputError:  # (refused: nothing written, the id is free again)
            if held and queue is not None and dedup is not None and execution_id is not None:
                await queue_options.forget_dedup(self, queue.name, dedup, execution_id)
            raise

    async def send(
        self, execution_id: str, topic: str, payload: Any = None, **kw: Any
    ) -> ExecutionResult:
        """Deliver a message on ``topic`` and run the receiver (``message_id``, ``by``: see
        :func:`loom.primitives.messages.send_from_outside`)."""
        return await messages.send_from_outside(self, execution_id, topic, payload, **kw)

    async def get_event(self, execution_id: str, key: str, timeout: float = 0.0) -> Any:
        """The value published under ``key``, waiting up to ``timeout`` s (loom.primitives.published)."""
        return await published.get_event(self, execution_id, key, timeout=timeout)

    async def update(
        self,
        execution_id: str,
        name: str,
        args: Any = None,
        *,
        update_id: str | None = None,
        by: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send update ``name`` to the flow and return its handler's value, waiting up to
        ``timeout`` seconds (``None``: as long as it takes). ``update_id`` (default: a new
        one) makes a repeat the same update, answered the same; ``by`` is recorded. See
        :mod:`loom.primitives.updates` and :func:`loom.primitives.update_calls.update`."""
        return await update_calls.update(
            self, execution_id, name, args, update_id=update_id, by=by, timeout=timeout
        )

    async def start_update(
        self,
        execution_id: str,
        name: str,
        args: Any = None,
        *,
        update_id: str | None = None,
        by: str | None = None,
    ) -> UpdateOutcome:
        """Validate and accept update ``name`` without waiting for its answer; where it
        stands (its ``update_id`` to await with :meth:`update_result`)."""
        return await update_calls.start_update(
            self, execution_id, name, args, update_id=update_id, by=by
        )

    async def update_result(
        self, execution_id: str, update_id: str, *, timeout: float | None = None
    ) -> Any:
        """The value of an accepted update, waiting up to ``timeout`` seconds for it."""
        return await update_calls.update_result(self, execution_id, update_id, timeout=timeout)

    async def update_outcome(
        self, execution_id: str, update_id: str, *, wait: float = 0.0
    ) -> UpdateOutcome:
        """Where an update stands (accepted, completed, failed), waiting up to ``wait``
        seconds for its answer; raises nothing for a failed handler."""
        return await update_calls.outcome(self, execution_id, update_id, wait)

    async def query(self, execution_id: str, name: str, args: Any = None) -> Any:
        """The value the flow's query handler ``name`` computes from where the execution
        stands; nothing is written (see :mod:`loom.primitives.queries`)."""
        return await queries.query(self, execution_id, name, args)

    async def read_stream(
        self,
        execution_id: str,
        key: str,
        offset: int = 0,
        *,
        limit: int = 100,
        timeout: float = 0.0,
    ) -> StreamChunk:
        """The values of the flow's stream ``key`` from ``offset`` on (at most ``limit``),
        waiting up to ``timeout`` seconds for one; the next offset and whether the stream is
        over (see :mod:`loom.primitives.streams`)."""
        return await streams.read_stream(
            self, execution_id, key, offset, limit=limit, timeout=timeout
        )

    def stream(self, execution_id: str, key: str, offset: int = 0) -> AsyncIterator[Any]:
        """Every value of the flow's stream ``key`` from ``offset`` on, as they come, until
        it is closed or the execution ends: ``async for value in rt.stream(id, key)``."""
        return streams.stream(self, execution_id, key, offset)

    fork = fork_from  # a new execution reusing a recorded prefix (loom.ops.fork)
    bulk = bulk_operation  # cancel, resume or retry what a filter selects (loom.ops.bulk)

    @property
    def schedules(self) -> Schedules:
        """Schedules at run time: create, update, pause, unpause, trigger, backfill,
        delete, list (:mod:`loom.primitives.schedule_admin`)."""
        return Schedules(self)
