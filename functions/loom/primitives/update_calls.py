"""The caller's side of updates: validate and accept, hand the execution on, wait for the answer.

``Runtime.update`` (and ``start_update`` / ``update_result``, ``loom update``, the HTTP
routes) come here; :mod:`loom.primitives.updates` says what happens in the flow.

Accepting is a decision like any control write (``loom.kernel.decide``), with one more
condition: the validator ran on a replay of the state at seq ``n`` (nothing written), and
``UpdateAccepted`` is appended only if the log still ends at ``n``. If it moved (a step, a
resume, another update), the state is reloaded and the validator runs again on it, so an
update is never accepted on a state its validator did not see. An update id already in the
log is not validated again: the same name and arguments are the same update, answered from
the log; other ones are refused with :class:`~loom.errors.UpdateConflictError`.

Waiting for the answer reads the summary's last seq (a cheap read) and loads the state only
when the log has grown.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from loom import crash
from loom import events as ev
from loom.errors import (
    ExecutionFinishedError,
    ExecutionSupersededError,
    InputError,
    UnknownUpdateError,
    UpdateConflictError,
    UpdateFailedError,
    UpdateRejectedError,
    UpdateTimeoutError,
)
from loom.ids import check_execution_id
from loom.kernel.decide import NOTHING, Decision, write
from loom.kernel.effects import message_of
from loom.kernel.execution_limits import check_room
from loom.kernel.fold import ExecutionState
from loom.kernel.payloads import canonical_json, dump_exact
from loom.primitives import handlers
from loom.primitives.replay_view import View, viewing
from loom.primitives.updates import UPDATE_GATE, slot_key
from loom.primitives.waits import log_grew
from loom.store.base import StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

__all__ = ["UpdateOutcome", "outcome", "start_update", "update", "update_result"]

MAX_UPDATE_ID: Final = 512
MAX_VALIDATIONS: Final = 60
"""Validations one acceptance makes before it gives up on a log that keeps moving (each
after a random pause that grows: the writers ahead of it pass)."""
ENDED: Final = "execution_ended"


class UpdateOutcome(BaseModel):
    """Where one update stands: accepted (its handler has not returned yet), completed
    (``output``) or failed (``error``: the handler raised, or the run ended first)."""

    model_config = ConfigDict(extra="forbid")

    execution_id: str
    update_id: str
    name: str
    status: Literal["accepted", "completed", "failed"]
    output: Any = None
    error: dict[str, Any] | None = None


def check_update_id(update_id: object) -> str:
    """``update_id`` if it can name an update, else :class:`InputError`."""
    if (
        not isinstance(update_id, str)
        or not update_id
        or len(update_id) > MAX_UPDATE_ID
        or not update_id.isprintable()
    ):
        raise InputError(
            f"an update id is a printable string of 1 to {MAX_UPDATE_ID} characters, "
            f"got {update_id!r}",
            code="invalid_update_id",
            details={"update_id": repr(update_id)[:300]},
        )
    return update_id


def check_update_name(name: object) -> str:
    """``name`` if it can name an update handler, else :class:`InputError`."""
    if not isinstance(name, str) or not name or len(name) > handlers.MAX_NAME:
        raise InputError(
            f"an update name is a non-empty string of at most {handlers.MAX_NAME} "
            f"characters, got {name!r}",
            code="invalid_update",
        )
    return name


class _Stale(Exception):
    """The log moved since the validator ran: validate again on ``state``."""

    def __init__(self, state: ExecutionState) -> None:
        super().__init__("stale")
        self.state = state


async def start_update(
    rt: Runtime,
    execution_id: str,
    name: str,
    args: Any = None,
    *,
    update_id: str | None = None,
    by: str | None = None,
) -> UpdateOutcome:
    """Validate and accept an update, then run the execution (see the module docstring).

    Returns:
        Where the update stands: ``accepted``, or already answered (a repeat, or an inline
        run that got that far).

    Raises:
        UnknownExecutionError: No such execution.
        ExecutionFinishedError: The execution ended.
        UpdateRejectedError: No handler ``name`` where the flow stands, its validator
            refused, or the execution is parked.
        UpdateConflictError: ``update_id`` names another update.
        InvalidPayloadError: ``args`` are not exact JSON, or do not fit the handler.
        LimitExceededError: The execution's log holds ``max_events`` events.
    """
    eid = check_execution_id(execution_id)
    check_update_name(name)
    uid = f"upd:{uuid.uuid4()}" if update_id is None else check_update_id(update_id)
    value = handlers.as_json(args, "an update's arguments")
    raw = dump_exact(value, "update arguments")
    digest = hashlib.sha256(canonical_json(value).encode()).hexdigest()[:32]
    await rt.require(eid)
    state, accepted = await _accept(rt, await rt.load_state(eid), uid, name, value, raw, digest, by)
    if accepted:
        crash.point("after_update_accepted", uid)
    if accepted or state.updates[uid]["status"] == "accepted":
        # A repeat of an update not answered yet runs the execution too: the caller that
        # accepted it may have died before it did (a live holder makes this a no-op).
        await _wake(rt, state)
    return await outcome(rt, eid, uid)


async def _accept(
    rt: Runtime,
    state: ExecutionState,
    uid: str,
    name: str,
    value: Any,
    raw: bytes,
    digest: str,
    by: str | None,
) -> tuple[ExecutionState, bool]:
    """Validate on ``state`` and append the acceptance conditioned on its seq; again on a
    newer state if the log moved. Whether this call accepted it (else: a repeat)."""
    stored: Any = None
    for attempt in range(MAX_VALIDATIONS):
        if attempt:  # the log moved under the last validation: let the writers ahead pass
            await asyncio.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))
        if uid in state.updates:
            _check_same(state, uid, name, digest)
            return state, False
        _check_open(state)
        check_room(rt, state)  # a full log takes no update (nothing written)
        async with viewing(rt, state) as view:
            _validate(view, state.execution_id, name, value)
        if stored is None:  # (once: a blob is written once, whatever the retries)
            stored, _ = await rt.payloads.encode(value, f"{state.execution_id}/update", raw)
        seen = state.last_seq

        def decide(now: ExecutionState, seen: int = seen, stored: Any = stored) -> Decision:
            if uid in now.updates:
                return NOTHING  # the same id landed meanwhile: checked below
            if now.last_seq != seen:
                raise _Stale(now)  # the validator did not see this state
            _check_open(now)
            check_room(rt, now)
            slot = now.update_slots + 1
            event = ev.UpdateAccepted(
                update_id=uid, name=name, args=stored, digest=digest, slot=slot, by=by
            )
            opens = any(
                g["on"] == UPDATE_GATE and g["correlation_key"] == slot_key(slot)
                for g in now.gates.values()
            )
            wakes = opens and now.status == "suspended"
            return Decision([event], StatusChange("running") if wakes else None)

        try:
            state, wrote = await write(rt, state, decide)
        except _Stale as stale:
            state = stale.state
            continue
        if not wrote:
            _check_same(state, uid, name, digest)
        return state, wrote
    raise ExecutionSupersededError(
        f"the log of {state.execution_id!r} kept changing while update {name!r} was "
        "validated; nothing was written, send it again",
        details={"execution_id": state.execution_id, "update_id": uid},
    )


def _check_open(state: ExecutionState) -> None:
    """Refuse an update to an execution that ended or is parked."""
    eid = state.execution_id
    if state.finished:
        raise ExecutionFinishedError(
            f"execution {eid!r} is {state.status}; update refused",
            details={"execution_id": eid, "status": state.status},
        )
    if state.parked_reason is not None:
        raise UpdateRejectedError(
            f"execution {eid!r} is parked ({state.parked_reason}); update refused until an "
            "operator lets it run again",
            code="execution_parked",
            details={"execution_id": eid},
        )


def _check_same(state: ExecutionState, uid: str, name: str, digest: str) -> None:
    rec = state.updates[uid]
    if rec["name"] != name or rec.get("digest") != digest:
        raise UpdateConflictError(
            f"update {uid!r} of {state.execution_id!r} was sent with another name or other "
            "arguments; use a new update id",
            details={"execution_id": state.execution_id, "update_id": uid, "name": rec["name"]},
        )


def _validate(view: View, eid: str, name: str, value: Any) -> None:
    """Refuse the update unless the flow has its handler and the validator lets it pass."""
    found = view.handlers.update(name)
    if found is None:
        names = sorted(view.handlers.updates)
        raise UpdateRejectedError(
            f"execution {eid!r} has no update handler {name!r} where it stands "
            f"(registered: {', '.join(names) or 'none'})",
            code="unknown_update_handler",
            details={"execution_id": eid, "update": name, "registered": names},
        )
    parsed = found.parse(value)
    if found.validator is None:
        return
    try:
        found.call(found.validator, parsed, name)
    except Exception as exc:
        raise UpdateRejectedError(
            f"update {name!r} refused by its validator: {message_of(exc)}",
            details={"execution_id": eid, "update": name, "type": type(exc).__name__},
        ) from exc


async def _wake(rt: Runtime, state: ExecutionState) -> ExecutionResult | None:
    """Run the execution, as a resume does: its flow runs the handler."""
    if state.status != "running":
        return None  # a live session merges it; a parked or in-doubt one runs it later
    eid = state.execution_id
    return await rt._dispatch(eid, state.flow, "resume", f"{eid}:{state.last_seq}")  # pyright: ignore[reportPrivateUsage]


async def outcome(
    rt: Runtime, execution_id: str, update_id: str, wait: float = 0.0
) -> UpdateOutcome:
    """Where update ``update_id`` stands, waiting up to ``wait`` seconds for its answer.

    Raises:
        UnknownExecutionError: No such execution.
        UnknownUpdateError: The execution accepted no update ``update_id``.
    """
    eid, uid = check_execution_id(execution_id), check_update_id(update_id)
    seen = (await rt.require(eid)).last_seq
    loop = asyncio.get_running_loop()  # (its clock: a test's fake wall clock stands still)
    deadline = loop.time() + wait
    while True:
        state = await rt.load_state(eid)
        got = await _outcome(rt, state, uid)
        if got.status != "accepted" or loop.time() >= deadline:
            return got
        seen = max(seen, state.last_seq)
        await log_grew(rt, eid, seen, deadline)


async def _outcome(rt: Runtime, state: ExecutionState, uid: str) -> UpdateOutcome:
    eid = state.execution_id
    rec = state.updates.get(uid)
    if rec is None:
        raise UnknownUpdateError(
            f"execution {eid!r} accepted no update {uid!r}",
            details={"execution_id": eid, "update_id": uid},
        )
    fields: dict[str, Any] = {"execution_id": eid, "update_id": uid, "name": rec["name"]}
    if rec["status"] == "completed":
        output = await rt.payloads.decode(rec.get("output"), eid)
        return UpdateOutcome(status="completed", output=output, **fields)
    if rec["status"] == "failed":
        return UpdateOutcome(status="failed", error=rec.get("error"), **fields)
    if state.finished:  # it ended with this handler unfinished: no answer will come
        message = f"execution {eid!r} {state.status} before the update's handler returned"
        error = {"code": ENDED, "type": None, "message": message}
        return UpdateOutcome(status="failed", error=error, **fields)
    return UpdateOutcome(status="accepted", **fields)


def value_of(got: UpdateOutcome, timeout: float | None) -> Any:
    """The update's value, or the error its outcome calls for."""
    if got.status == "completed":
        return got.output
    if got.status == "failed":
        error = got.error or {}
        raise UpdateFailedError(
            f"update {got.update_id!r} ({got.name}) of {got.execution_id!r} failed: "
            f"{error.get('message', '')}",
            update_id=got.update_id,
            error=error,
        )
    raise UpdateTimeoutError(
        f"update {got.update_id!r} of {got.execution_id!r} is accepted and not answered "
        f"after {timeout:g}s; await it again with its update id",
        details={"execution_id": got.execution_id, "update_id": got.update_id},
    )


FOREVER: Final = 365 * 24 * 3600.0


async def update(
    rt: Runtime,
    execution_id: str,
    name: str,
    args: Any = None,
    *,
    update_id: str | None = None,
    by: str | None = None,
    timeout: float | None = None,
) -> Any:
    """Send an update and return its handler's value (``Runtime.update``).

    Raises:
        UpdateFailedError: The handler raised, or the execution ended first.
        UpdateTimeoutError: ``timeout`` seconds passed first (the update stays accepted).
        UpdateRejectedError, UpdateConflictError, ExecutionFinishedError: See
            :func:`start_update`.
    """
    got = await start_update(rt, execution_id, name, args, update_id=update_id, by=by)
    return await update_result(rt, execution_id, got.update_id, timeout=timeout, first=got)


async def update_result(
    rt: Runtime,
    execution_id: str,
    update_id: str,
    *,
    timeout: float | None = None,
    first: UpdateOutcome | None = None,
) -> Any:
    """Wait for the answer of an accepted update (``timeout``: seconds, ``None`` for as
    long as it takes) and return its value, or raise as :func:`update` does."""
    if timeout is not None and not timeout >= 0:
        raise InputError(f"timeout must be seconds >= 0, got {timeout!r}")
    got = first
    if got is None or got.status == "accepted":
        wait = FOREVER if timeout is None else timeout
        got = await outcome(rt, execution_id, update_id, wait)
    return value_of(got, timeout)
