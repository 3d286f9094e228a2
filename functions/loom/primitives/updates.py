"""Updates: a caller sends a request to a running execution and gets its handler's value back
(Temporal's update).

The flow registers a handler (and, optionally, a validator) over its own state::

    async def add(item: str) -> int:
        items.append(item)
        return len(items)

    ctx.set_update_handler("add", add, validator=refuse_empty)

and a caller sends an update: ``Runtime.update(id, "add", "apple")`` (``loom update``,
``POST /executions/{id}/updates``). How it maps onto the log:

1. **Validation, nothing written.** The caller's side replays the execution in memory to
   where it stands (:mod:`loom.primitives.replay_view`) and calls the validator there: a
   validator that raises refuses the update with
   :class:`~loom.errors.UpdateRejectedError`, as does a name the flow has no handler for.
2. **Acceptance, one event.** :class:`~loom.events.UpdateAccepted` is appended, conditioned
   on the seq the validator saw: if the log moved meanwhile, the validation runs again on
   the new state (:mod:`loom.primitives.update_calls`). It takes the next *slot* of the
   run, like a message in a mailbox.
3. **The handler runs in the flow's session.** The first update handler a flow registers
   starts its *listener*, a task of the flow that waits on the gate ``loom.update`` /
   ``#1``, then ``#2``…: the ``n``-th accepted update is the resume of the ``n``-th gate,
   so a suspended flow is woken as by a resume, a live session merges it as it merges a
   resume (and, while a step of it is in flight, looks for it: ``Journal.catch_up``), and
   the handler starts at the acceptance's place in the log order, live and on every replay
   (``loom.kernel.ordering``). Each handler runs as a task of its own, its
   steps numbered ``u{n}.1``, ``u{n}.2``… (the gate itself is step ``u{n}``), so they
   never shift the flow's own step ids.
4. **Completion, one event.** When the handler returns (or raises), its value (or error)
   is recorded as :class:`~loom.events.UpdateCompleted`; a replay runs the handler again
   (it rebuilds the flow's state) and records nothing. Callers read the answer from the
   log, so every caller of an update id gets the same one.

A worker that dies between acceptance and completion leaves the acceptance in the log: the
next execute call replays the flow, reaches the update's turn and runs the handler again.
When the flow returns, or continues as new, before a handler has completed, the update has
no answer: its callers get :class:`~loom.errors.UpdateFailedError`. ``await
ctx.all_handlers_finished()`` waits for the running handlers first (Temporal's
``all_handlers_finished``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Final

from loom import crash
from loom import events as ev
from loom.errors import InputError, StoreError
from loom.kernel.context import (
    SCOPE,
    STEP_NUMBERING,
    FlowContext,
    Scope,
    SupersededSignal,
    off_scope,
    owned,
)
from loom.kernel.effects import error_info
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.primitive import Primitive
from loom.primitives import handlers
from loom.primitives.continuation import KEEP_MESSAGE_IDS

if TYPE_CHECKING:
    from loom.kernel.session import Session
    from loom.primitives.handlers import Handlers

__all__ = ["UPDATE_GATE", "slot_key"]

UPDATE_GATE: Final = "loom.update"
"""The gate a flow's update listener waits on, keyed ``#{slot}``."""
LOOK_FIRST: Final = 0.1
LOOK_EVERY: Final = 1.0
"""How soon, and then at least how often, a session with a step in flight looks for updates."""
KEEP_UPDATE_IDS: Final = KEEP_MESSAGE_IDS
"""How long an update of an ended run stays known (its id refused as new, its answer kept)."""
CONTINUED: Final = {
    "code": "continued_as_new",
    "type": None,
    "message": "the run continued as new before the update's handler returned",
}


def slot_key(slot: int) -> str:
    """The correlation key of the ``slot``-th update of a run."""
    return f"#{slot}"


# -- the fold -----------------------------------------------------------------------------


def _gate_open(s: ExecutionState, slot: int) -> bool:
    key = slot_key(slot)
    return any(g["on"] == UPDATE_GATE and g["correlation_key"] == key for g in s.gates.values())


def _accepted(s: ExecutionState, e: ev.UpdateAccepted) -> None:
    if e.update_id in s.updates:
        return  # (never written twice: a fold is total all the same)
    s.update_slots = max(s.update_slots, e.slot)
    s.updates[e.update_id] = {
        "name": e.name,
        "slot": e.slot,
        "run": s.run,
        "digest": e.digest,
        "status": "accepted",
        "seq": e.seq,
        "at": e.at,
        "by": e.by,
    }
    key = resume_key(UPDATE_GATE, slot_key(e.slot))
    s.resumes[key] = {"payload": e.args, "timed_out": False, "seq": e.seq}
    if s.status == "suspended" and s.parked_reason is None and _gate_open(s, e.slot):
        s.status = "running"


def _completed(s: ExecutionState, e: ev.UpdateCompleted) -> None:
    rec = s.updates.get(e.update_id)
    if rec is None or rec["status"] != "accepted":
        return
    rec["status"] = "completed" if e.error is None else "failed"
    rec["output"] = e.output
    rec["error"] = None if e.error is None else e.error.model_dump()
    rec["done_seq"] = e.seq


def _continued(s: ExecutionState, e: ev.ExecutionContinued) -> None:
    """The ended run's unanswered updates fail. Every update is kept (its id and answer) for
    :data:`KEEP_UPDATE_IDS` after the run that accepted it ended, as message ids are: a
    caller retrying late gets the answer, not a second run of the handler. Decided by the
    continue's recorded time, so every fold agrees."""
    prefix = resume_key(UPDATE_GATE, "")
    s.resumes = {k: r for k, r in s.resumes.items() if not k.startswith(prefix)}
    for uid, rec in list(s.updates.items()):
        if rec["status"] == "accepted":
            rec.update(status="failed", error=dict(CONTINUED), done_seq=e.seq)
        ended = rec.setdefault("run_ended_at", e.at)
        if ended <= e.at - KEEP_UPDATE_IDS:
            del s.updates[uid]
    s.update_slots = 0


def by_slot(state: ExecutionState, slot: int) -> tuple[str, dict[str, Any]] | None:
    """The update of the current run at ``slot``: its id and record."""
    for uid, rec in state.updates.items():
        if rec["slot"] == slot and rec["run"] == state.run:
            return uid, rec
    return None


# -- the flow's side ------------------------------------------------------------------------


def _task(session: Session, coro: Any, prefix: str) -> None:
    """Run ``coro`` as a task of the flow whose steps are numbered under ``prefix``: not a
    child of the task that asks (that would take one of its step numbers)."""
    context = contextvars.copy_context()
    flat = session.state.step_numbering == STEP_NUMBERING  # (as the root scope's)
    context.run(SCOPE.set, Scope(prefix, session, flat))
    loop = asyncio.get_running_loop()
    session.track(asyncio.Task(coro, loop=loop, context=context))


async def _listen(session: Session, known: Handlers) -> None:
    """Receive the run's updates in slot order and start each one's handler."""
    with _ending_the_flow(session):
        await _receive(session, known)


@contextlib.contextmanager
def _ending_the_flow(session: Session) -> Generator[None]:
    """End the flow when this task of it stops on the session's signal (a divergence, a
    supersession, a failed store): the flow's root may be waiting on something no step
    will ever settle (an ``asyncio.Event`` only a handler sets), and it awaits no handler."""
    try:
        yield
    except BaseException:
        if session.signal is not None:
            session._halt(session.signal)  # pyright: ignore[reportPrivateUsage]
        raise


async def _receive(session: Session, known: Handlers) -> None:
    scope = SCOPE.get()
    assert scope is not None
    slot = 0
    while True:
        slot += 1
        step_id = scope.next_id()  # u1, u2…
        args = await session.gate(step_id, UPDATE_GATE, slot_key(slot), None)
        found = by_slot(session.state, slot)
        if found is None:  # (a resume on this gate comes only with its acceptance)
            continue
        uid, rec = found
        _task(session, _handle(session, known, uid, rec["name"], args), f"{step_id}.")


def _listening(session: Session, known: Handlers) -> None:
    """Start the session's update listener (and, live, its look-in) once."""
    if known.listening:
        return
    known.listening = True
    _task(session, _listen(session, known), "u")
    if not session.journal.dry:
        session.track(asyncio.Task(_look_in(session), context=contextvars.Context()))


async def _look_in(session: Session) -> None:
    """While a step of the flow is in flight (an effect, a wait), look for updates accepted
    meanwhile and fold them in: the session would otherwise see them only when it next
    writes, and an update sent by that very step (an effect updating its own flow) would
    wait for ever. A summary read per look, only while something is in flight."""
    pause = LOOK_FIRST
    while session.signal is None:
        await asyncio.sleep(pause)
        if not session._inflight:  # pyright: ignore[reportPrivateUsage]
            pause = LOOK_FIRST  # nothing in flight: the session's own writes merge them
            continue
        journal = session.journal
        try:
            async with journal.lock:
                grew = await journal.catch_up()
        except SupersededSignal:
            return  # the next append finds it out and ends the session
        except StoreError:
            grew = False  # only a look: the next append meets the store as it is
        if grew:
            session._deliver_resumes()  # pyright: ignore[reportPrivateUsage]
        pause = min(pause * 2, LOOK_EVERY)


async def _handle(session: Session, known: Handlers, uid: str, name: str, args: Any) -> None:
    known.started()
    try:
        with _ending_the_flow(session):
            output, error = await _call(known, name, args)
            await _record(session, uid, output, error)
    finally:
        known.finished()


async def _call(known: Handlers, name: str, args: Any) -> tuple[Any, ev.ErrorInfo | None]:
    """Run the handler ``name``: its JSON value, or the error it ended with."""
    found = known.update(name)
    if found is None:  # the code changed since the update was accepted
        message = f"the flow has no update handler {name!r} where the update's turn came"
        return None, ev.ErrorInfo(code="unknown_update_handler", message=message)
    try:
        result = found.call(found.fn, found.parse(args), name)
        if inspect.isawaitable(result):
            result = await result
        return handlers.as_json(result, f"what update handler {name!r} returned"), None
    except Exception as exc:  # the update fails, the flow goes on (signals pass through)
        return None, error_info(exc)


async def _record(session: Session, uid: str, output: Any, error: ev.ErrorInfo | None) -> None:
    """Append the update's answer, unless the log holds it (a replay)."""
    rec = session.state.updates.get(uid)
    if rec is None or rec["status"] != "accepted":
        return
    if session.signal is not None:
        raise session.signal
    rt, eid = session.rt, session.execution_id
    session._inflight += 1  # pyright: ignore[reportPrivateUsage]  # the flow is not blocked meanwhile
    try:
        with off_scope():
            stored = None
            if error is None:
                try:
                    stored, _ = await session._unless_store_fails(  # pyright: ignore[reportPrivateUsage]
                        rt.payloads.encode(output, f"{eid}/update")
                    )
                except InputError as exc:  # not exact JSON, or too large to keep
                    error = error_info(exc)
            crash.point("before_update_completed", uid)
            await session.append([ev.UpdateCompleted(update_id=uid, output=stored, error=error)])
            crash.point("after_update_completed", uid)
    finally:
        session._inflight -= 1  # pyright: ignore[reportPrivateUsage]
        session._poke()  # pyright: ignore[reportPrivateUsage]


class UpdatesContext(FlowContext):
    """The ``ctx`` methods of updates."""

    __slots__ = ()

    def set_update_handler(
        self,
        name: str,
        handler: Callable[..., Any] | None,
        *,
        validator: Callable[..., Any] | None = None,
    ) -> None:
        """Answer updates ``name`` with ``handler`` (``async def`` or ``def``, of no argument
        or one); ``validator`` (a plain ``def`` with the same parameter) refuses an update by
        raising, before anything is recorded. ``None`` removes the handler. Not a step: see
        :mod:`loom.primitives.updates`.

        Raises:
            ConfigurationError: A bad name, an ``async`` validator, or a handler of two or
                more parameters.
        """
        owned(self)
        handlers.check_name(name, "update")
        session = self._session
        known = handlers.of(session)
        if handler is None:
            known.updates.pop(name, None)
            return
        known.updates[name] = handlers.handler(handler, "update", validator)
        _listening(session, known)

    def set_dynamic_update_handler(
        self, handler: Callable[..., Any] | None, *, validator: Callable[..., Any] | None = None
    ) -> None:
        """Answer updates of every name no other handler has with ``handler(name, args)``
        (``args`` as JSON; ``validator(name, args)`` refuses by raising); ``None`` removes
        it (Temporal's dynamic update handler)."""
        owned(self)
        session = self._session
        known = handlers.of(session)
        if handler is None:
            known.dynamic_update = None
            return
        known.dynamic_update = handlers.dynamic(handler, "update", validator)
        _listening(session, known)

    async def all_handlers_finished(self) -> None:
        """Return once no update handler of this flow is running (await it before the flow
        returns or continues as new, so no accepted update is left without its answer)."""
        owned(self)
        known = handlers.known(self._session)
        if known is not None:
            await known.idle()


PRIMITIVE = Primitive(
    "updates",
    head={
        "UpdateAccepted": _accepted,
        "UpdateCompleted": _completed,
        "ExecutionContinued": _continued,
    },
    context=UpdatesContext,
    own_gates=(UPDATE_GATE,),
    deliveries=("UpdateAccepted",),
)
