"""A queued start's options: priority, deduplication id, delay and a timeout from dequeue;
and a queue's per-worker concurrency.

Given on the :class:`~loom.primitives.queues.QueueRef` of a start::

    QueueRef("emails", "cust-42", priority=1, deduplication_id="welcome:cust-42",
             delay=30, timeout=600)

and recorded on ``ExecutionStarted.queue_options``, so every worker admits it the same way:

* **priority** (an int, 0 to 2**31-1, default 0): when the queue is saturated, a waiting
  execution of a lower priority is granted first (then the oldest first). A new start
  never overtakes a waiting execution of a better priority that could run.
* **deduplication id**: while an execution started on the queue with that id is queued or
  running (not completed, failed nor cancelled), another start with it is refused with
  :class:`~loom.errors.QueueDeduplicatedError` (409 ``queue_deduplicated``), naming the
  execution holding it; nothing is written. A repeat of the same start (the same execution
  id) is not refused. The id is held in the store's :class:`~loom.store.leases.LeaseSet`
  and given up when its execution ends; a holder that ended without giving it up (a crash
  in between) is found ended and replaced by the next start.
* **delay** / **not_before**: the execution is not admitted before that moment (the start
  records the absolute time: ``not_before``, epoch seconds); it waits as a durable timer,
  not in the queue, so it holds no slot and blocks nobody.
* **timeout** (seconds): a deadline that starts when the queue first admits the execution,
  not when it is started: the first claim after admission records ``ExecutionDequeued``
  with ``deadline = now + timeout`` (the earlier of it and a flow timeout counts), and past
  it the execution is cancelled with cleanup like any flow timeout.

**Per-worker concurrency** (``app.queue(..., worker_concurrency=n)``): at most ``n``
executions of the queue run at once on one worker (one :class:`~loom.runtime.Runtime`: one
process of ``loom serve`` or one Cloud Run instance), besides the queue's global
``concurrency``. A worker at its limit takes no lease: the execution waits (a grant woken on
a full worker is handed back to the queue at once).
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, cast

from loom import crash
from loom import events as ev
from loom.errors import InputError, QueueDeduplicatedError, UnknownExecutionError

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.state import ExecutionState


@dataclass(frozen=True, slots=True)
class QueueRef:
    """Where a start goes: a declared queue, and a partition key serializing its executions;
    and its options (:mod:`loom.primitives.queue_options`).

    Attributes:
        name: The queue.
        partition_key: Executions of one key run one at a time.
        priority: Lower is granted first when the queue is saturated (0 to 2**31-1).
        deduplication_id: Refuse another start with this id while one is queued or running.
        delay: Seconds before it may be admitted (or ``not_before``, a moment).
        not_before: When it may be admitted (epoch seconds or an aware datetime).
        timeout: Seconds it may run from when the queue first admits it.
    """

    name: str
    partition_key: str | None = None
    priority: int = 0
    deduplication_id: str | None = None
    delay: float | timedelta | None = None
    not_before: float | datetime | None = None
    timeout: float | timedelta | None = None


def queue_ref(name: str | None, partition_key: str | None, **given: Any) -> QueueRef | None:
    """The :class:`QueueRef` of a start's ``queue``/``partition_key`` options and the
    :class:`QueueRef` fields in ``given`` (those ``None`` left out), if any.

    Raises:
        InputError: A partition key or another queue option without a queue.
    """
    given = {k: v for k, v in given.items() if v is not None}
    if name is None:
        if partition_key is not None or given:
            what = "a partition key" if partition_key is not None else ", ".join(sorted(given))
            raise InputError(
                f"{what} needs a queue", details={"partition_key": partition_key, **given}
            )
        return None
    return QueueRef(name, partition_key, **given)


MAX_PRIORITY: Final = 2**31 - 1
MAX_DELAY: Final = 366 * 86400.0  # a year and a day
STALE_HOLD: Final = 60.0  # seconds before a deduplication id held by no execution is taken
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})


def _seconds(what: str, value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    seconds = cast(object, value.total_seconds() if isinstance(value, timedelta) else value)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InputError(
            f"{what} must be a number of seconds, not {value!r}", details={what: str(value)}
        )
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_DELAY:
        raise InputError(
            f"{what} must be 0 to {MAX_DELAY:.0f} seconds, not {value!r}",
            details={what: str(value)},
        )
    return float(seconds)


def _moment(value: float | datetime, now: float) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InputError("not_before must be an aware datetime (with a time zone)", details={})
        value = value.timestamp()
    moment = cast(object, value)
    if isinstance(moment, bool) or not isinstance(moment, int | float) or not math.isfinite(moment):
        raise InputError(f"not_before must be epoch seconds, not {value!r}", details={})
    if value - now > MAX_DELAY:
        raise InputError(f"not_before is more than {MAX_DELAY:.0f} seconds away", details={})
    return float(value)


def options(
    *,
    priority: int = 0,
    deduplication_id: str | None = None,
    delay: float | timedelta | None = None,
    not_before: float | datetime | None = None,
    timeout: float | timedelta | None = None,
    now: float,
) -> dict[str, str | int | float] | None:
    """The ``queue_options`` a start records (``None``: none given).

    Raises:
        InputError: A priority that is not an int of 0 to 2**31-1, an empty or over-long
            deduplication id, a negative or non-finite delay or timeout (or a zero timeout),
            both a delay and a not-before time.
    """
    found: dict[str, str | int | float] = {}
    rank = cast(object, priority)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_PRIORITY:
        raise InputError(
            f"priority must be an int of 0 to {MAX_PRIORITY}, not {priority!r}",
            details={"priority": str(priority)},
        )
    if priority:
        found["priority"] = priority
    dedup = cast(object, deduplication_id)
    if deduplication_id is not None:
        if not isinstance(dedup, str) or not 0 < len(deduplication_id) <= 512:
            raise InputError(
                "deduplication_id must be a string of 1 to 512 characters",
                details={"deduplication_id": str(deduplication_id)[:80]},
            )
        found["dedup"] = deduplication_id
    if delay is not None and not_before is not None:
        raise InputError("give a delay or a not-before time, not both", details={})
    at = _moment(not_before, now) if not_before is not None else None
    wait = _seconds("delay", delay)
    at = now + wait if wait else at
    if at is not None and at > now:
        found["not_before"] = at
    limit = _seconds("timeout", timeout)
    if limit is not None:
        if limit <= 0:
            raise InputError("timeout must be positive", details={"timeout": str(timeout)})
        found["timeout"] = limit
    return found or None


def priority_of(state: ExecutionState) -> int:
    """The execution's priority in its queue (0 unless given)."""
    return int(state.queue_options.get("priority") or 0)


def not_before(state: ExecutionState) -> float | None:
    """When the execution may first be admitted, if it was delayed and never admitted."""
    at = state.queue_options.get("not_before")
    return None if at is None or "dequeued_at" in state.queue_options else float(at)


def on_claim(state: ExecutionState, now: float) -> list[ev.Event]:
    """The ``ExecutionDequeued`` the first admitted claim writes, when the start gave a
    timeout from dequeue (else nothing: the log is as it was)."""
    timeout = state.queue_options.get("timeout")
    if timeout is None or "dequeued_at" in state.queue_options:
        return []
    return [ev.ExecutionDequeued(deadline=now + float(timeout))]


def dequeued(s: ExecutionState, e: ev.ExecutionDequeued) -> None:
    s.queue_options = {**s.queue_options, "dequeued_at": e.at}
    if e.deadline is not None:
        s.deadline = e.deadline if s.deadline is None else min(s.deadline, e.deadline)


def started(s: ExecutionState, e: ev.ExecutionStarted) -> None:
    s.queue_options = dict(e.queue_options) if e.queue_options else {}


# -- deduplication ids -------------------------------------------------------------------------


async def hold_dedup(runtime: Runtime, queue: str, dedup_id: str, execution_id: str) -> bool:
    """Hold ``dedup_id`` on ``queue`` for ``execution_id`` before its start is written;
    True when this call took it (False: the execution held it already, a repeat).

    Raises:
        QueueDeduplicatedError: A queued or running execution holds it.
    """
    leases = runtime.store.leases()
    now = runtime.clock()
    held = await leases.deduplicate(queue, dedup_id, execution_id, now)
    if crash.ARMED:
        crash.point("after_dedup_held")
    if held.holder == execution_id:
        return held.since == now
    if await _still_holds(runtime, held.holder, now - held.since):
        raise _refused(queue, dedup_id, held.holder)
    again = await leases.deduplicate(queue, dedup_id, execution_id, now, replaces=held.holder)
    if again.holder != execution_id:  # a racing start replaced it first
        raise _refused(queue, dedup_id, again.holder)
    return True


async def _still_holds(runtime: Runtime, holder: str, held_for: float) -> bool:
    try:
        status = (await runtime.store.summary(holder)).status
    except UnknownExecutionError:  # its start not written yet, or it failed: wait a while
        return held_for < STALE_HOLD
    return status not in TERMINAL


def _refused(queue: str, dedup_id: str, holder: str) -> QueueDeduplicatedError:
    return QueueDeduplicatedError(
        f"queue {queue!r} already has execution {holder!r} queued or running with "
        f"deduplication id {dedup_id!r}",
        details={"queue": queue, "deduplication_id": dedup_id, "execution_id": holder},
    )


async def forget_dedup(runtime: Runtime, queue: str, dedup_id: str, execution_id: str) -> None:
    """Give up ``dedup_id`` if ``execution_id`` holds it (a no-op otherwise)."""
    await runtime.store.leases().forget(queue, dedup_id, execution_id)


def holds_dedup(state: ExecutionState) -> bool:
    """Whether the execution ended holding a deduplication id to give up."""
    return state.finished and state.queue is not None and "dedup" in state.queue_options


async def release_dedup(runtime: Runtime, state: ExecutionState) -> None:
    """The follow-up of an ended execution: give up its deduplication id."""
    assert state.queue is not None
    await forget_dedup(runtime, state.queue, str(state.queue_options["dedup"]), state.execution_id)


# -- per-worker concurrency --------------------------------------------------------------------

# Executions of each queue this worker runs, by runtime (a worker: one runtime per process).
_RUNNING: weakref.WeakKeyDictionary[Any, Counter[str]] = weakref.WeakKeyDictionary()


def take_worker_slot(runtime: Runtime, queue: str, limit: int | None) -> bool:
    """Count one more execution of ``queue`` on this worker, unless it runs ``limit``
    already (no ``await`` in between: exact on the worker's loop)."""
    running = _RUNNING.setdefault(runtime, Counter())
    if limit is not None and running[queue] >= limit:
        return False
    running[queue] += 1
    return True


def give_worker_slot(runtime: Runtime, queue: str) -> None:
    """Count one execution of ``queue`` fewer on this worker."""
    running = _RUNNING.get(runtime)
    if running is not None and running[queue] > 0:
        running[queue] -= 1


def worker_running(runtime: Runtime, queue: str) -> int:
    """Executions of ``queue`` this worker runs now."""
    return _RUNNING.get(runtime, Counter())[queue]
