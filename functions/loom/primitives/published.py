"""Published state: ``ctx.set_event`` in a flow, ``Runtime.get_event`` for its callers.

A flow publishes a value under a key while it keeps running (progress, a payment URL, a
status for a UI)::

    await ctx.set_event("progress", {"done": 3, "of": 10})

Each call is a step: :class:`~loom.events.EventPublished` is appended at once (durable, so
a caller sees it while the flow goes on) and served from the log on replay, where it appends
nothing. The latest value of a key wins. Callers read it with ``Runtime.get_event`` (``loom
get-event``, ``GET /executions/{id}/events/{key}``), optionally waiting up to a timeout for
a key nobody set yet; the value stays readable after the execution ends.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from loom import events as ev
from loom.errors import EventNotFoundError, InputError
from loom.ids import check_execution_id
from loom.kernel import cancellation
from loom.kernel.context import FlowContext, next_step_id, off_scope
from loom.kernel.defs import to_json_value
from loom.kernel.divergence import visit
from loom.kernel.fold import ExecutionState
from loom.kernel.primitive import Primitive

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session

__all__ = ["PUBLISH", "get_event", "set_event"]

PUBLISH: Final = "loom.set_event"
"""The step record of a ``ctx.set_event`` (what the log shows in place of an effect name)."""
MAX_KEY: Final = 256
MAX_WAIT: Final = 60.0
"""The longest a ``get_event`` call waits (a long poll is bounded; call again to go on)."""
POLL_FIRST: Final = 0.05
POLL_EVERY: Final = 0.5
"""A waiter checks the log's last seq after ``POLL_FIRST`` s, then ever less often, at
least every ``POLL_EVERY`` s: a summary read, not a load of the state."""


def check_key(key: object) -> str:
    """``key`` if it is a usable event key, else an :class:`InputError` naming why."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise InputError(
            f"an event key is a non-empty string of at most {MAX_KEY} characters, got {key!r}",
            details={"key": repr(key)[:300]},
            code="invalid_event_key",
        )
    return key


def _published(s: ExecutionState, e: ev.EventPublished) -> None:
    s.published[e.key] = {"value": e.value, "seq": e.seq, "at": e.at}


def _published_step(s: ExecutionState, e: ev.EventPublished) -> None:
    s.steps[e.step_id] = {"effect": PUBLISH, "status": "completed", "seq": e.seq}


async def set_event(session: Session, step_id: str, key: str, value: Any) -> None:
    """The session side of ``ctx.set_event``: append once, serve the record on replay."""
    if session.signal is not None:
        raise session.signal
    check_key(key)
    rec = session.state.steps.get(step_id)
    if rec is None:
        session._check_unused(step_id, f"set_event({key!r})")  # pyright: ignore[reportPrivateUsage]
        await cancellation.checkpoint(session)  # a new step: a pending cancel arrives here
        with off_scope():
            stored, _ = await session._unless_store_fails(  # pyright: ignore[reportPrivateUsage]
                session.rt.payloads.encode(to_json_value(value), f"{session.execution_id}/event")
            )
            if session.signal is not None:  # the run ended meanwhile (continue_as_new)
                raise session.signal
            await session.append([ev.EventPublished(step_id=step_id, key=key, value=stored)])
        rec = session.state.steps[step_id]
    elif rec.get("effect") != PUBLISH:
        session._park(  # pyright: ignore[reportPrivateUsage]
            step_id, f"step {step_id}: log has effect {rec.get('effect')!r}, flow set an event"
        )
    visit(session, step_id)  # (the replay check counts it reached, as a send)
    await session._turn(rec.get("seq", 0))  # pyright: ignore[reportPrivateUsage]


async def get_event(rt: Runtime, execution_id: str, key: str, *, timeout: float = 0.0) -> Any:
    """The latest value published under ``key``, waiting up to ``timeout`` seconds (at most
    :data:`MAX_WAIT`) for a first one.

    Raises:
        UnknownExecutionError: No such execution.
        EventNotFoundError: Nothing was published under ``key`` (within the timeout; an
            execution that ended never will).
        InputError: ``key`` or ``timeout`` is unusable.
    """
    eid, key = check_execution_id(execution_id), check_key(key)
    if not 0 <= timeout <= MAX_WAIT:  # also refuses NaN
        raise InputError(f"timeout must be between 0 and {MAX_WAIT} seconds, got {timeout!r}")
    seen = (await rt.require(eid)).last_seq
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = POLL_FIRST
    while True:
        state = await rt.load_state(eid)
        got = state.published.get(key)
        if got is not None:
            return await rt.payloads.decode(got["value"], eid)
        seen = max(seen, state.last_seq)
        if state.finished or deadline - loop.time() <= 0:
            raise EventNotFoundError(
                f"execution {eid!r} published nothing under {key!r}"
                + (f" within {timeout:g}s" if timeout and not state.finished else ""),
                details={"execution_id": eid, "key": key, "status": state.status},
            )
        # Waiting costs one summary read per poll: the state is loaded again only once
        # the log has grown (a waiter on a big execution must not fold it five times a
        # second; forty of them starved the process).
        while True:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_EVERY)
            if (await rt.store.summary(eid)).last_seq != seen:
                break


class PublishedContext(FlowContext):
    """The ``ctx`` methods of published state."""

    __slots__ = ()

    async def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` for callers to read while the flow runs on (a
        step; the latest value wins; see :mod:`loom.primitives.published`)."""
        await set_event(self._session, next_step_id(self), key, value)


PRIMITIVE = Primitive(
    "published",
    head={"EventPublished": _published},
    step={"EventPublished": _published_step},
    context=PublishedContext,
)
