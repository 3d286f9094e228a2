"""Jobs: the engine's own work that is not an execution, dispatched like one.

A job is a named piece of maintenance or admission: an admit pass of one queue shard
(:mod:`loom.primitives.queues`), the purge of one shard (:mod:`loom.ops.retention`), the sweep of one
shard, the schedules of one shard. It travels through the dispatcher (a Cloud Tasks task
``POST /tasks/job`` on a queue of its class, routed by its shard; a task of
``loom serve``'s loop), so the work of a busy deployment spreads over many short requests
instead of one long one, each resumable: a job that runs out of time enqueues its own
continuation.

``Job.key`` makes the job's id (``{kind}:{key}``): the dispatcher deduplicates by it (the
task name is its hash), so a job keyed by an interval (``orders/0@1700000000``) runs once
per interval however many callers ask. Without a dispatcher that carries jobs, a job runs
in the calling task.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from loom.errors import InputError
from loom.kernel.primitive import INSTALLED

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

log = logging.getLogger("loom.kernel.jobs")

# The task queue class each kind travels on (see ``loom_gcp._task_queues``); a kind not
# listed is maintenance.
CLASSES: Final = {"admit": "admission", "purge": "maintenance", "sweep": "maintenance",
                  "schedules": "maintenance"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Job:
    """One job (see the module docstring).

    Attributes:
        kind: What it is: an installed primitive handles it (``Primitive.jobs``).
        key: Unique per run of the job: the dispatcher deduplicates by ``{kind}:{key}``.
        args: The handler's arguments (JSON).
        shard: Routes the job to one queue of its class.
    """

    kind: str
    key: str
    args: dict[str, Any] = field(default_factory=dict[str, Any])
    shard: int = 0

    @property
    def job_id(self) -> str:
        """``{kind}:{key}``: what deduplicates the job."""
        return f"{self.kind}:{self.key}"

    @property
    def task_class(self) -> str:
        """The task queue class the job travels on."""
        return CLASSES.get(self.kind, "maintenance")

    def to_json(self) -> dict[str, Any]:
        """The job as JSON (the body of its task)."""
        return {"kind": self.kind, "key": self.key, "args": self.args, "shard": self.shard}

    @classmethod
    def from_json(cls, data: object) -> Job:
        """Parse a job's JSON.

        Raises:
            InputError: Not a job (naming what is wrong).
        """
        if not isinstance(data, dict):
            raise InputError("a job is a JSON object", details={"got": type(data).__name__})
        raw: dict[str, Any] = data  # pyright: ignore[reportUnknownVariableType]
        kind, key, args, shard = (raw.get(k) for k in ("kind", "key", "args", "shard"))
        if not isinstance(kind, str) or kind not in INSTALLED.jobs:
            raise InputError(
                f"unknown job kind {kind!r} (known: {', '.join(sorted(INSTALLED.jobs))})",
                details={"kind": repr(kind)[:100]},
            )
        if not isinstance(key, str) or not key or not isinstance(args, dict):
            raise InputError("a job needs a non-empty 'key' and an 'args' object")
        if isinstance(shard, bool) or not isinstance(shard, int) or shard < 0:
            raise InputError("a job's 'shard' is a non-negative integer", details={"shard": shard})
        return cls(str(kind), key, dict(args), shard)  # pyright: ignore[reportUnknownArgumentType]


async def run_job(runtime: Runtime, job: Job) -> dict[str, Any]:
    """Run one job here (its handler, installed by the primitive that dispatches it:
    ``loom.kernel.primitive``); what it did.

    Raises:
        InputError: No installed primitive handles its kind.
    """
    handler = INSTALLED.jobs.get(job.kind)
    if handler is None:
        raise InputError(f"unknown job kind {job.kind!r}", details={"kind": job.kind})
    return await handler(runtime, job)


def carries_jobs(runtime: Runtime) -> bool:
    """Whether the runtime's dispatcher delivers jobs (else :func:`enqueue` runs them in the
    calling task)."""
    return runtime.dispatcher is not None and runtime.dispatcher.carries_jobs


async def enqueue(runtime: Runtime, job: Job, not_before: float | None = None) -> None:
    """Have ``job`` run, not before ``not_before``: through the dispatcher when it carries
    jobs; else here, now (or, for a later time, on this process's loop: best effort, as a
    process's timers are)."""
    if carries_jobs(runtime):
        assert runtime.dispatcher is not None
        await runtime.dispatcher.dispatch_job(job, not_before)
        return
    delay = 0.0 if not_before is None else not_before - runtime.clock()
    if delay <= 0:
        await run_job(runtime, job)
        return
    loop = asyncio.get_running_loop()
    loop.call_later(delay, lambda: _spawn(runtime, job))


_RUNNING: set[asyncio.Task[Any]] = set()


def _spawn(runtime: Runtime, job: Job) -> None:
    async def run() -> None:
        try:
            await run_job(runtime, job)
        except Exception:
            log.warning("job %s failed", job.job_id, exc_info=True)

    task = asyncio.get_running_loop().create_task(run())
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)
