"""Durability of a session's appends: ``strict`` (every append written before anyone outside
the log can see it) or ``batched`` (durable points).

A flow (or a whole app) chooses with ``durability="batched"``; the default is ``"strict"``.

In a batched session, what the delivery contract already allows to be lost is kept in
memory instead of being written at once: the claim, the completions of idempotent steps and
recorded decisions (``ctx.now``/``uuid``/``random``). They are *unforced*: folded into the
session's state, handed to the flow, and written together with the next *durable point*, one
append (one transaction, one Firestore commit) for all of them. A durable point is forced
before anything whose loss would matter:

* an intent record (``EffectStarted`` of a non-idempotent effect), and any other event that
  is not one of the three kinds above (a failure, a suspension, a park, the end);
* a claim extension (the lease must be visible to other workers);
* the end of the ``execute`` call, before its reply (and so before a resume is answered);
* a store limit: an append may carry only ``EventStore.max_append_events`` events and
  ``max_batch_bytes`` bytes (Firestore: one commit of at most 10 MiB);
* something another party will see: a child start, a message sent (:func:`force`, which
  awaits :meth:`Journal.durable_point <loom.kernel.journal.Journal.durable_point>`; other code
  about to do such a thing calls it too).

While the flow runs several tasks at once, appends are strict: the order in which racing
outcomes reached the flow is then observable, and only a written log fixes it.

After a crash, the unforced events since the last durable point are gone: the next execute
replays to the last durable point and invokes those idempotent steps again, with the same
idempotency keys (``execution_id:step_id``) — the at-least-once contract of idempotent
effects. A decision is drawn afresh, which is safe because nothing durable depended on it.
Another worker may run the execution meanwhile (the claim was not written either); the
first durable point settles it: one append wins, the other session finds the winner's claim
and stops.

A strict session (:class:`StrictJournal`) holds less, and for less long: only the completion
of an idempotent step (its ``EffectCompleted``, with the decisions pending before it), and
only until the session does anything else. It is forced

* before the next effect is invoked, any effect (:func:`before_effect`, awaited where the
  session starts a live step: before its cancel check and a non-idempotent step's intent
  record, so a cancel that landed meanwhile is seen before the effect can start);
* with any other event, in the same append: the next step's own completion, a suspension,
  a park, the end (``ExecutionCompleted``/``ExecutionFailed``), a cancel delivery...;
* before a child start or a message sent (:func:`force`), before a claim extension, at
  :meth:`~loom.kernel.journal.Journal.durable_point`, and so before the reply of the ``execute``
  call (the end is an append).

A completion the store would refuse (``EventStore.max_event_bytes``) is never held, in
either mode: it is appended at once, so the refusal fails the step that made it.

The claim is written at once, and nothing is held while the flow runs several tasks. So no
one outside the log sees a strict step before its record is durable, and a crash in the
hold window only loses the last idempotent step: it is invoked again with the same key,
which strict mode already does after a crash between an effect's return and its append. A
non-idempotent completion is never held (lost, it would leave the step in doubt). What this
buys: the last step of a flow is written with its end, one commit per execution fewer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from loom import crash
from loom import events as ev
from loom.errors import StoreError, StoreLimitError
from loom.kernel.context import AbortSignal, SupersededSignal
from loom.kernel.fold import ExecutionState, evolve
from loom.kernel.journal import READY, Journal

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session
    from loom.kernel.steps import EffectSteps

_DEFERRABLE = frozenset({"EffectCompleted", "DecisionRecorded"})
# A margin for the fields of an EffectCompleted besides its output (ids, counts, times).
_ENVELOPE_BYTES = 4_096


class BatchedJournal(Journal):
    """A journal with durable points (see the module docstring).

    Attributes:
        unforced: Events folded into :attr:`state` and not yet written, in log order.
    """

    def __init__(self, runtime: Runtime, state: ExecutionState, holder: str) -> None:
        super().__init__(runtime, state, holder)
        self.session: Session | None = None
        self.unforced: list[ev.Event] = []
        self.held: list[str] = []  # steps whose completion a strict journal holds (crash points)
        self.durable_seq = state.last_seq  # (``_durable`` inlined: every session makes one)
        self.durable_status = (state.status, state.parked_reason)
        self._bytes = 0

    def _durable(self, state: ExecutionState) -> None:
        self.durable_seq = state.last_seq
        self.durable_status = (state.status, state.parked_reason)

    def defer(
        self, events: Sequence[ev.Event], now: float | None = None, size: int | None = None
    ) -> None:
        """Number and fold ``events`` and keep them unforced (e.g. the claim); ``size`` is
        their JSON bytes when the caller measured them already."""
        batch = list(events)
        self._take(
            batch,
            self.rt.clock() if now is None else now,
            self._size(batch) if size is None else size,
        )

    def _take(self, batch: list[ev.Event], now: float, size: int) -> None:
        """:meth:`defer` of a batch nobody else holds (numbered in place, kept as it is)."""
        self._bytes += size
        state = self.state
        ev.number(batch, state.last_seq, now)
        for event in batch:
            evolve(state, event)
        self.unforced += batch

    def defer_now(self, events: Sequence[ev.Event]) -> bool:
        """Keep ``events`` unforced if nothing forces a durable point (see
        :meth:`Journal.defer_now`): the whole of an idempotent step's append."""
        now = self.rt.clock()
        if now + self.rt.claim_ttl / 2 > self.claim_until or self.closed is not None:
            return False  # a claim extension is due, or the run ended: ``try_append`` says
        batch = [*self.pending, *events]
        if not batch or not self._deferrable(batch):
            return False
        size = self._size(batch)
        if self.unforced and not self._fits(batch, size):
            return False  # what waits is written first
        self._take(batch, now, size)
        self.pending = []
        return True

    async def try_append(self, events: Sequence[ev.Event]) -> bool:
        if self.closed is not None:
            raise self.closed
        batch = self._batch(events)
        if not batch:
            return True
        # One append must stay within the store's limits: write what waits first.
        size = self._size(batch)
        if self.unforced and not self._fits(batch, size) and not await self._flush([]):
            return False
        if self._deferrable(batch):
            self._take(batch, self.rt.clock(), size)
            self.pending = []
            return True
        return await self._flush(batch)

    async def durable_point(self) -> None:
        async with self.lock:
            while not await self._flush(list(self.pending)):
                pass

    def _deferrable(self, batch: Sequence[ev.Event]) -> bool:
        session = self.session
        if session is None or session.order.open_tasks > 1:
            return False
        for event in batch:
            if event.type not in _DEFERRABLE:
                return False
            if isinstance(event, ev.EffectCompleted):
                effect = self.rt.app.effects.get(event.effect)
                if effect is None or not effect.idempotent or not self._storable(event):
                    return False
        return True

    def _storable(self, event: ev.EffectCompleted) -> bool:
        """Whether the store takes ``event`` (``EventStore.max_event_bytes``): one it would
        refuse is appended at once, so the refusal fails the step that made it, before the
        flow has its output (``loom.kernel.limits``). Only a large output is measured."""
        limit = self.rt.store.max_event_bytes
        if limit is None or 2 * event.output_bytes + _ENVELOPE_BYTES <= limit:
            return True
        return len(ev.event_to_json(event).encode()) <= limit

    def _size(self, batch: Sequence[ev.Event]) -> int:
        """The JSON bytes of ``batch`` when the store limits them per append (else 0)."""
        if self.rt.store.max_batch_bytes is None:
            return 0
        return sum(len(ev.event_to_json(e)) for e in batch)

    def _fits(self, batch: Sequence[ev.Event], size: int) -> bool:
        """Whether ``batch`` (of ``size`` JSON bytes) may join the unforced events in one
        append (store limits)."""
        store = self.rt.store
        most = store.max_append_events
        if most is not None and len(self.unforced) + len(batch) > most:
            return False
        return store.max_batch_bytes is None or self._bytes + size <= store.max_batch_bytes

    async def _flush(self, batch: list[ev.Event]) -> bool:
        """Write the unforced events, then ``batch``; False after a conflict."""
        if not batch and not self.unforced:
            return True
        if await self._write(self.unforced, batch, self.durable_seq, self.durable_status):
            self._forced()
            return True
        self._replay_unforced()
        return False

    def _forced(self) -> None:
        """What was unforced is written: it is durable from here on."""
        self.unforced, self._bytes = [], 0
        state = self.state  # (``_durable`` inlined: once per durable point)
        self.durable_seq, self.durable_status = state.last_seq, (state.status, state.parked_reason)
        if self.held:  # (a strict journal's)
            held, self.held = self.held, []
            if crash.ARMED:
                for step_id in held:  # each held completion is durable from here on
                    crash.point("after_complete", step_id)

    async def _over_limit(
        self, events: Sequence[ev.Event], exc: StoreLimitError, keep: int = 0
    ) -> bool:
        # ``events`` starts with the unforced events: they are written again from the
        # reloaded state (nothing of the refused append was), so none stays waiting twice.
        # The store takes each of them (``_storable``, ``_fits``): what it refused is in the
        # rest, so the record of the refusal must not blame an unforced step.
        keep, self.unforced, self._bytes = len(self.unforced), [], 0
        return await super()._over_limit(events, exc, keep)

    def _expected(self) -> int:
        return self.durable_seq  # what it holds unforced is not in the log yet

    def _merged(self) -> None:
        self._replay_unforced()

    def _replay_unforced(self) -> None:
        """After a conflict (a resume or verdict landed; the state was reloaded), put the
        unforced events after the foreign ones, keeping their times."""
        self._durable(self.state)
        for offset, event in enumerate(self.unforced, start=1):
            object.__setattr__(event, "seq", self.state.last_seq + offset)
        for event in self.unforced:
            evolve(self.state, event)


class StrictJournal(BatchedJournal):
    """The journal of a strict session: a batched journal that holds only an idempotent
    step's completion, and forces it before the next effect is invoked (see the module
    docstring). Everything else is written at once, as in :class:`~loom.kernel.journal.Journal`.
    """

    def hold(self, event: ev.EffectCompleted) -> bool | None:
        """Hold ``event``, the completion of a step :mod:`loom.kernel.fast_step` invoked, where
        :meth:`~BatchedJournal.defer_now` would hold it alone, and pass the ``held`` crash
        point (:meth:`completed`); False or None, holding nothing: append it the general
        way (see :meth:`Journal.hold <loom.kernel.journal.Journal.hold>`).

        ``defer_now([event])`` and ``completed`` for the commonest case (nothing pending,
        nothing held, a claim not yet due: every step of a sequential flow), in one call
        where they take eight (``tests/core/test_fast_step.py`` compares the two).
        """
        rt, state = self.rt, self.state
        if self.lock._locked or self.pending or self.unforced or self.closed is not None:  # pyright: ignore[reportPrivateUsage]
            return False  # (the lock: ``Session.append`` asks ``locked()``, a call)
        session = self.session
        if session is None or session.order.open_tasks > 1:
            return False
        effect = rt.app.effects.get(event.effect)
        if effect is None or not effect.idempotent:
            return False
        limit = rt.store.max_event_bytes  # (``_storable``'s first look inlined)
        large = limit is not None and 2 * event.output_bytes + _ENVELOPE_BYTES > limit
        if large and not self._storable(event):
            return False
        now = rt.clock()  # (last: read once, as ``defer_now`` reads it, whatever comes)
        if now + rt.claim_ttl / 2 > self.claim_until:
            return None  # a claim extension is due: it is written at once
        if rt.store.max_batch_bytes is not None:
            self._bytes += len(ev.event_to_json(event))  # (``_size``)
        values: dict[str, Any] = event.__dict__  # (``ev.number`` of one event)  # pyright: ignore[reportAssignmentType]
        values["seq"], values["at"] = state.last_seq + 1, now
        evolve(state, event)
        self.unforced.append(event)
        self.held.append(event.step_id)
        if crash.ARMED:
            crash.point("held", event.step_id)  # the hold window: only this step would be lost
        return True

    def completed(self, step_id: str) -> None:
        last = self.unforced[-1] if self.unforced else None
        if isinstance(last, ev.EffectCompleted) and last.step_id == step_id:
            self.held.append(step_id)
            crash.point("held", step_id)  # the hold window: only this step would be lost
        else:
            crash.point("after_complete", step_id)

    async def durable_point(self) -> None:
        if not self.unforced:  # (pending decisions alone ride the next append, as before)
            return
        async with self.lock:  # (the batched journal's, inlined: one frame fewer per step)
            while not await self._flush(list(self.pending)):
                pass


def before_effect(session: EffectSteps) -> Awaitable[None]:
    """What a session awaits right before it invokes an effect: in a strict session that
    holds a completion, :func:`force`; else nothing (no coroutine)."""
    journal = session.journal
    if isinstance(journal, StrictJournal) and journal.unforced:
        return _force_held(session, journal)
    return READY


async def _force_held(session: EffectSteps, journal: StrictJournal) -> None:
    """:func:`force` with the strict journal's :meth:`~StrictJournal.durable_point` and
    its ``_flush`` inlined: every step after the first of a strict flow awaits this, and
    waits in it for the store, one frame fewer to suspend and resume through."""
    try:
        async with journal.lock:
            while True:  # (``while not await journal._flush(list(journal.pending))``)
                batch = list(journal.pending)
                if not batch and not journal.unforced:
                    break  # (written meanwhile, by an append that took the lock first)
                expected, before = journal.durable_seq, journal.durable_status
                if await journal._write(journal.unforced, batch, expected, before):  # pyright: ignore[reportPrivateUsage]
                    journal._forced()  # pyright: ignore[reportPrivateUsage]
                    break
                journal._replay_unforced()  # pyright: ignore[reportPrivateUsage]
    except SupersededSignal as signal:
        session._raise(signal)  # pyright: ignore[reportPrivateUsage]
    except StoreError as exc:
        session._raise(AbortSignal(exc))  # pyright: ignore[reportPrivateUsage]


async def force(session: EffectSteps) -> None:
    """Make what the session holds durable, before something another party sees (an effect
    invoked, a child started, a message sent). A store failure or an overtaking ends the
    flow as a failed append does."""
    try:
        await session.journal.durable_point()
    except SupersededSignal as signal:
        session._raise(signal)  # pyright: ignore[reportPrivateUsage]
    except StoreError as exc:
        session._raise(AbortSignal(exc))  # pyright: ignore[reportPrivateUsage]


def new_journal(session: Session, state: ExecutionState) -> Journal:
    """The journal of a new session: its class's, or the one of the flow's durability when
    the class is the plain journal."""
    cls = session.journal_class
    if cls is not Journal:
        return cls(session.rt, state, session.holder)
    journal = (BatchedJournal if session.flow.durability == "batched" else StrictJournal)(
        session.rt, state, session.holder
    )
    journal.session = session
    return journal
