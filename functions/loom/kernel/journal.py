"""The session's end of the log: numbering, claim extension, appends, conflicts, snapshots.

A ``Journal`` owns the folded state of one ``execute`` call. It evolves the state with each
batch before writing it (the status summary travels in the same write), extends the claim
when the lease is half spent, and takes a snapshot every ``snapshot_every`` events. On an
append conflict it reloads: a delivery to the execution's inbox (a resume, a message, a
cancel request) is folded in and the caller retries; anything else (another holder's
claim, an end, a park) means this call was overtaken. A batch
over the store's limits is replaced by the record of what it was about failing
(:mod:`loom.kernel.limits`); long runs of decisions are written ahead within them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from loom import crash
from loom import events as ev
from loom.errors import AppendConflictError, StoreLimitError
from loom.kernel.context import SCOPE, SupersededSignal
from loom.kernel.fold import ExecutionState, evolve
from loom.kernel.limits import instead
from loom.store.base import AppendRequest, StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

# Events that never change the status summary: the hot path skips computing it.
_QUIET_TYPES = frozenset(
    {"EffectCompleted", "EffectFailed", "EffectStarted", "EffectRetried", "DecisionRecorded"}
)


class _Ready:
    """An awaitable that is done already: awaiting it returns ``None`` without a frame."""

    __slots__ = ()

    if TYPE_CHECKING:

        def __await__(self) -> Generator[Any, None, None]: ...

    else:
        # An exhausted iterator built in C (awaiting it is done at once): a generator
        # method would cost a Python frame on every await, several a step. (A builtin
        # stored on a class is no method: it is called without ``self``.)
        __await__ = ().__iter__


READY = _Ready()  # awaited where there is nothing to wait for


class AppendLock(asyncio.Lock):
    """``asyncio.Lock`` whose ``async with`` takes a free lock without a coroutine: every
    append of a session takes it, and it is nearly always free. Contended, it is the
    standard lock (same fairness, same cancellation)."""

    # A free lock's state as class defaults, set on the instance once it changes:
    # ``asyncio.Lock.__init__`` (two assignments, a Python call per session) is skipped.
    _waiters = None
    _locked = False
    __init__ = object.__init__

    def __aenter__(self) -> Awaitable[None]:  # type: ignore[override]
        if not self._locked and not self._waiters:
            self._locked = True
            return READY
        return super().__aenter__()

    def __aexit__(self, *_: object) -> Awaitable[None]:  # type: ignore[override]
        if self._waiters or not self._locked:
            self.release()  # (wakes the first waiter; raises if not held, as ever)
        else:
            self._locked = False  # what ``release`` comes to with nobody waiting
        return READY


class Journal:
    """Appends for one session. Callers hold :attr:`lock` around :meth:`try_append`."""

    dry = False  # a replay that writes nothing (no live timer fires in one, either)
    # Set at a continue point (``loom.primitives.continuation``): the run ended, nothing more may be
    # appended to it; each append raises this instead.
    closed: BaseException | None = None
    # The seq an append that failed or was cut off after folding its events was conditioned
    # on: the state is ahead of what is known to be in the log until it is reloaded.
    unsure: int | None = None

    def __init__(self, runtime: Runtime, state: ExecutionState, holder: str) -> None:
        self.rt = runtime
        self.state = state
        self.holder = holder
        self.execution_id = state.execution_id
        self.pending: list[ev.Event] = []  # decisions waiting for the next append
        self.lock = AppendLock()
        self.claim_until: float = (state.claim or {}).get("until", 0.0)
        self.since_snapshot = 0

    async def try_append(self, events: Sequence[ev.Event]) -> bool:
        """Write pending decisions and ``events``; False after a conflict (state reloaded).

        Raises:
            SupersededSignal: Another holder claimed the execution, or it was cancelled.
        """
        if self.closed is not None:
            raise self.closed
        if self.pending and not await self._write_decisions_ahead(len(events) + 1):
            return False  # (+ 1: room for a claim extension)
        batch = self._batch(events)
        if not batch:
            return True
        state = self.state
        return await self._write([], batch, state.last_seq, (state.status, state.parked_reason))

    def defer_now(self, events: Sequence[ev.Event]) -> bool:
        """Take ``events`` without writing them, if this journal may (a batched one, for
        events that wait for the next durable point); False: append them with
        :meth:`try_append`. Synchronous, so the caller needs the lock only to see it free:
        nothing else runs before it returns. An execution's end (completed, failed, parked)
        is never taken: the session appends one without asking (``loom.kernel.endings``)."""
        return False

    def hold(self, event: ev.EffectCompleted) -> bool | None:
        """Hold ``event``, the completion of a step :mod:`loom.kernel.fast_step` invoked, where
        :meth:`defer_now` would (True). Else the caller appends it and then calls
        :meth:`completed`: False, with ``Session.append``; None (a claim extension is due,
        and the clock was read to know it), with ``Session.append(..., defer=False)``, as
        ``defer_now`` would read the clock again to say no. A strict journal's shortcut
        (``loom.kernel.durability``); this journal never holds."""
        return False

    async def durable_point(self) -> None:
        """Make every event this session has appended durable before going on.

        Call it before anything whose loss after a crash would matter outside the log (a
        child start, a message sent). This journal writes every append at once, so here it
        returns at once; see :mod:`loom.kernel.durability` for the journals that hold events.
        """

    def completed(self, step_id: str) -> None:
        """The completion of ``step_id`` was appended (the ``after_complete`` crash point)."""
        crash.point("after_complete", step_id)

    async def _write(
        self,
        written: Sequence[ev.Event],
        batch: list[ev.Event],
        expected: int,
        before: tuple[str, str | None],
    ) -> bool:
        """Number and fold ``batch``, then append ``written`` (already folded) and it after
        ``expected``; False after a conflict (state reloaded)."""
        if self.unsure is not None:  # the last append failed after the state was folded
            await self._resync()
            return False
        state = self.state
        if batch:  # (a strict journal forcing what it holds has nothing new)
            ev.number(batch, state.last_seq, self.rt.clock())
            for event in batch:
                evolve(state, event)
        events = [*written, *batch]
        change = None
        for event in events:  # (a loop, not ``all(...)``: no generator on every append)
            if event.type not in _QUIET_TYPES:
                change = self._status_change(before)
                break
        snapshot = None if change is None else self._riding_snapshot(change, len(events))
        request = AppendRequest(self.execution_id, expected, events, change, snapshot)
        token = SCOPE.set(None)  # the store's own timers are the loop's, not the flow's
        try:
            await self.rt.store.append(request)
        except AppendConflictError:
            await self._merge_foreign(expected)
            return False
        except StoreLimitError as exc:
            return await self._over_limit(events, exc)
        except BaseException:
            # Failed or cut off (a store error, a cancelled task) after the state was folded:
            # whether it landed is unknown, so the next append reloads first.
            self.unsure = expected
            raise
        finally:
            SCOPE.reset(token)
        self.pending = []
        if snapshot is not None:
            self.since_snapshot = 0
            return True
        self.since_snapshot += len(events)
        if self.since_snapshot >= self.rt.snapshot_every:
            await self.rt.save_snapshot(self.state)
            self.since_snapshot = 0
        return True

    def _riding_snapshot(self, change: StatusChange, appended: int) -> str | None:
        """The state to keep as a snapshot with this append: where the call stops (the
        status leaves ``running``) after a tail worth a snapshot, if the store keeps them."""
        if change.status == "running":
            return None
        if not self.rt.store.keeps_append_snapshots:
            return None
        if self.since_snapshot + appended < self.rt.snapshot_min_tail:
            return None
        return self.state.to_json()

    async def _write_decisions_ahead(self, room: int) -> bool:
        """Append pending decisions ahead of a batch that would be over the store's
        ``max_append_events`` with them: a flow may make any number of decisions between
        two appends. False after a conflict (state reloaded)."""
        limit = self.rt.store.max_append_events
        while limit is not None and self.pending and len(self.pending) + room > limit:
            rest = self.pending[limit - 1 :]
            self.pending = self.pending[: limit - 1]
            written = await self.try_append([])
            self.pending += rest
            if not written:
                return False
        return True

    async def _over_limit(
        self, events: Sequence[ev.Event], exc: StoreLimitError, keep: int = 0
    ) -> bool:
        """Record what a batch over the store's limits was about as failed (``loom.kernel.limits``).
        The first ``keep`` events were not what was refused (held events the store takes):
        they are written again before the record.

        Raises:
            EffectFailedError: The step whose outcome was refused failed (recorded).
            StoreLimitError: The execution was recorded as failed, or nothing could be.
        """
        self.state = await self.rt.load_state(self.execution_id)  # the batch was not written
        self.claim_until = (self.state.claim or {}).get("until", 0.0)
        kept, events = list(events[:keep]), events[keep:]
        replacement = instead(events, exc)
        if replacement is None:  # our own small failure is refused: the decisions are the bulk
            if not self.pending:
                raise exc
            replacement = (list(events), exc)
        events, then = replacement
        if then is exc:
            self.pending = []  # the execution ends: decisions nobody will replay may go
        while not await self.try_append([*kept, *events]):
            pass
        if then is not None:
            raise then
        return True

    def _batch(self, events: Sequence[ev.Event]) -> list[ev.Event]:
        batch = [*self.pending, *events]
        now = self.rt.clock()
        if now + self.rt.claim_ttl / 2 > self.claim_until:
            self.claim_until = now + self.rt.claim_ttl
            batch.insert(0, ev.ExecutionClaimed(holder=self.holder, until=self.claim_until))
        return batch

    def _status_change(self, before: tuple[str, str | None]) -> StatusChange | None:
        s = self.state
        wake = s.next_wake_at() if s.status == "suspended" else None
        if (s.status, s.parked_reason) == before and wake is None:
            return None
        return StatusChange(s.status, wake, s.parked_reason)

    async def catch_up(self) -> bool:
        """Fold in what others appended since this journal last wrote, as a conflicting
        append would (deliveries to the inbox), without appending anything: a delivery
        then reaches a session whose flow writes nothing for a while (an effect in flight).
        True when the log had grown. Hold :attr:`lock` around it.

        Raises:
            SupersededSignal: Another writer decided for the execution meanwhile.
        """
        expected = self._expected()
        if (await self.rt.store.summary(self.execution_id)).last_seq <= expected:
            return False
        await self._merge_foreign(expected)
        self._merged()
        return True

    def _expected(self) -> int:
        """The seq the log ends at as far as this journal wrote it."""
        return self.state.last_seq

    def _merged(self) -> None:
        """After foreign events were folded in (a batched journal renumbers what it holds)."""

    async def _resync(self) -> None:
        """Reload after an append whose outcome is unknown: what it wrote, if it landed, is
        read back like another writer's (only a claim extension merges; anything else of
        this session's means the log moved on without it: the session stops)."""
        expected, self.unsure = self.unsure, None
        assert expected is not None
        await self._merge_foreign(expected)

    async def _merge_foreign(self, expected: int) -> None:
        """Fold in what others appended since ``expected``, or end the session.

        A running session shares its log only with deliveries to its inbox (a resume, a
        message, a cancel request): those are merged and the caller appends again. Anything
        else means another writer decided for the execution meanwhile (a claim, an end, a
        park in doubt or as poison): the session was overtaken and writes nothing more.
        """
        fresh = await self.rt.load_state(self.execution_id)
        foreign = await self.rt.store.read(self.execution_id, after_seq=expected)
        for event in foreign:
            if event.type in _DELIVERIES or (
                event.type == "ExecutionClaimed" and event.holder == self.holder
            ):
                continue
            raise SupersededSignal()
        self.state = fresh


# What others may append beside a live session without overtaking it (see ``_merge_foreign``;
# a primitive adds its own deliveries with ``add_deliveries``).
_DELIVERIES: set[str] = {"ExecutionResumed", "MessageReceived", "CancelRequested"}


def add_deliveries(types: Iterable[str]) -> None:
    """Let events of ``types`` be appended beside a live session: it merges them on a
    conflict and goes on, as it does a resume (``loom.kernel.primitive``'s ``deliveries``)."""
    _DELIVERIES.update(types)


class DryJournal(Journal):
    """Keeps what a replay would append in :attr:`tail` instead of writing it (for the test
    toolkit's replays and the pre-deploy replay check)."""

    dry = True

    def __init__(self, runtime: Runtime, state: ExecutionState, holder: str) -> None:
        super().__init__(runtime, state, holder)
        self.tail: list[ev.Event] = []

    async def try_append(self, events: Sequence[ev.Event]) -> bool:
        if self.closed is not None:
            raise self.closed
        self.tail.extend([*self.pending, *events])
        self.pending = []
        return True
