"""``InProcessDispatcher``: runs executions on a worker runtime in this process.

An immediate dispatch runs inline until the execution blocks (what the CLI and tests want);
a dispatch with ``not_before`` becomes a loop timer. Timers are durable because the store
holds every ``wake_at``: :meth:`recover` finds due and future ones after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loom.dispatch.base import Dispatcher
from loom.errors import ExecutionSupersededError, LoomError, StoreError
from loom.ids import id_problem
from loom.store.base import EventStore
from loom.wire import ExecutionPackage

if TYPE_CHECKING:
    from loom.workers.base import WorkerRuntime  # (any: a worker runtime is handed in)

if TYPE_CHECKING:
    from loom.kernel.jobs import Job
    from loom.kernel.runtime import Runtime

log = logging.getLogger("loom.dispatch")
_SEEN_MAX = 100_000  # dispatch ids remembered for deduplication (the log guards the rest)
_EARLY_MARGIN = 0.005  # loop time and wall time drift apart by µs; never fire a timer early


class InProcessDispatcher(Dispatcher):
    """Dispatches to ``worker`` (a local or remote worker runtime) from this process.

    Jobs (:mod:`loom.kernel.jobs`) run on this process's loop, each in a task of its own, against
    ``jobs`` (default: the runtime of a local worker); without one it carries no jobs.
    """

    inline = True

    def __init__(
        self,
        worker: WorkerRuntime,
        *,
        clock: Callable[[], float] = time.time,
        jobs: Runtime | None = None,
    ):
        self.worker = worker
        self.clock = clock
        self.jobs = jobs if jobs is not None else getattr(worker, "runtime", None)
        self.carries_jobs = self.jobs is not None
        self._seen: OrderedDict[str, None] = OrderedDict()  # bounded: `loom serve` runs long
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.superseded: list[str] = []

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        if self._remember(dispatch_id):
            return
        delay = 0.0 if not_before is None else not_before - self.clock()
        if delay > 0:
            loop = asyncio.get_running_loop()
            self._timers[dispatch_id] = loop.call_later(
                delay + _EARLY_MARGIN, self._spawn, package, dispatch_id
            )
            return
        try:
            await self._run(package, inline=True)
        except StoreError:
            # Not delivered: a repeated start (or retry) must be able to dispatch it again.
            self._seen.pop(dispatch_id, None)
            raise

    async def dispatch_job(self, job: Job, not_before: float | None = None) -> None:
        """Run ``job`` in a task of its own, now or at ``not_before`` (deduplicated by id)."""
        if self.jobs is None:
            await super().dispatch_job(job, not_before)
            return
        if self._remember(job.job_id):
            return
        runtime = self.jobs
        delay = 0.0 if not_before is None else max(0.0, not_before - self.clock())

        def start() -> None:
            self._timers.pop(job.job_id, None)
            self._track(asyncio.get_running_loop().create_task(self._run_job(runtime, job)))

        self._timers[job.job_id] = asyncio.get_running_loop().call_later(
            delay + _EARLY_MARGIN, start
        )

    async def _run_job(self, runtime: Runtime, job: Job) -> None:
        try:
            await runtime.run_job(job)
        except Exception:  # a job is redone by whoever asks for it next (or the sweep)
            log.warning("job %s failed", job.job_id, exc_info=True)

    def _remember(self, dispatch_id: str) -> bool:
        """Whether ``dispatch_id`` was dispatched already (else remember it)."""
        if dispatch_id in self._seen:
            return True
        self._seen[dispatch_id] = None
        if len(self._seen) > _SEEN_MAX:
            self._seen.popitem(last=False)
        return False

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn(self, package: ExecutionPackage, dispatch_id: str) -> None:
        self._timers.pop(dispatch_id, None)
        self._track(asyncio.get_running_loop().create_task(self._run(package)))

    async def _run(self, package: ExecutionPackage, inline: bool = False) -> None:
        try:
            await self.worker.run(package)
        except StoreError:
            if inline:
                raise  # the caller's own call failed to record: it must hear it and retry
            log.warning("dispatch of %s failed on the store", package.execution_id, exc_info=True)
        except ExecutionSupersededError:
            # Another holder owns it; it is not redispatched (expired claims are swept).
            self.superseded.append(package.execution_id)
            log.info("superseded", extra={"execution_id": package.execution_id})
        except LoomError as exc:
            log.warning("dispatch of %s failed: %s", package.execution_id, exc)
        except Exception:
            # A worker crash must not kill the dispatcher; the execution stays claimed until
            # its claim expires and a sweep redispatches it.
            log.exception("worker failed on %s", package.execution_id)

    @property
    def pending_timers(self) -> int:
        """How many timers wait in this process."""
        return len(self._timers)

    async def drain(self, *, timers_within: float = 0.0, timeout: float | None = None) -> None:
        """Wait until running dispatches end, and timers due within ``timers_within`` seconds
        have fired and ended too (later timers stay armed)."""
        loop = asyncio.get_running_loop()
        horizon = loop.time() + timers_within

        def due_soon() -> bool:
            return any(h.when() <= horizon for h in self._timers.values())

        async def settle() -> None:
            while self._tasks or due_soon():
                if self._tasks:
                    await asyncio.gather(*list(self._tasks), return_exceptions=True)
                else:
                    await asyncio.sleep(0.01)

        await asyncio.wait_for(settle(), timeout)

    async def recover(self, store: EventStore) -> int:
        """After a restart: run executions left running, re-arm every timer. Returns count."""
        count = 0
        for row in await store.list("running"):
            if id_problem(row.execution_id) is not None:
                continue  # stored before the id rule: the store refuses it now
            package = ExecutionPackage(execution_id=row.execution_id, flow=row.flow, reason="sweep")
            try:
                await self.dispatch(package, f"{row.execution_id}:{row.last_seq}:recover")
            except StoreError as exc:  # it stays running: the next recovery or call retries
                log.warning("recovering %s failed: %s", row.execution_id, exc)
            count += 1
        for row in await store.list("suspended"):
            if (
                row.wake_at is not None
                and row.parked_reason is None
                and not id_problem(row.execution_id)
            ):
                package = ExecutionPackage(
                    execution_id=row.execution_id, flow=row.flow, reason="timer"
                )
                await self.dispatch(
                    package, f"{row.execution_id}:{row.last_seq}:timer", not_before=row.wake_at
                )
                count += 1
        return count

    async def aclose(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
