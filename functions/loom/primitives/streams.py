"""Streams: a flow writes an ordered stream of values a caller reads as they come (DBOS
streams).

In the flow::

    for token in tokens:
        await ctx.write_stream("tokens", token)
    await ctx.close_stream("tokens")

Each write is a step: :class:`~loom.events.StreamWritten` is appended at once (durable: a
reader sees the value while the flow goes on) and served from the log on replay, where it
appends nothing, so a value is in the stream once however often the flow is replayed. The
values of a key are numbered from 0 in log order (their *offsets*). ``close_stream`` records
:class:`~loom.events.StreamClosed`: the stream holds every value it will. A stream also ends
with its execution (completed, failed, cancelled).

Readers read from an offset: ``Runtime.read_stream(id, key, offset)`` answers the values
from ``offset`` on (at most ``limit``), waiting up to ``timeout`` seconds for a first one,
with the next offset and whether the stream is over; ``Runtime.stream(id, key)`` iterates
over every value until it is (``loom stream ID KEY --follow``,
``GET /executions/{id}/streams/{key}?offset=&timeout=``). A reader costs a summary read
per look while it waits (:mod:`loom.primitives.waits`).

Bounded: an execution's streams hold at most ``max_stream_values`` values in all, one of
the execution's limits (:mod:`loom.kernel.execution_limits`: default 10,000, set per app,
flow or start). A write past it, or to a closed stream, raises into the flow
(:class:`~loom.errors.LimitExceededError`, :class:`~loom.errors.StreamClosedError`) and
records nothing: the log decides it the same way on every replay. Each value is an event of
the log, so ``max_events`` bounds streams too (a write is refused once the log is full).

Where the values are: in the log, not the state. The state keeps, per key, the count, the
end and the seq of every :data:`STRIDE`-th value, so a read from any offset starts at most
that many values before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel

from loom import crash
from loom import events as ev
from loom.errors import InputError, StreamClosedError
from loom.ids import check_execution_id
from loom.kernel import cancellation
from loom.kernel.context import FlowContext, next_step_id, off_scope
from loom.kernel.divergence import visit
from loom.kernel.execution_limits import exceeded, for_state
from loom.kernel.fold import ExecutionState
from loom.kernel.primitive import Primitive
from loom.primitives import handlers
from loom.primitives.published import MAX_WAIT, check_key
from loom.primitives.waits import log_grew

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session

__all__ = ["StreamChunk", "read_stream", "stream"]

WRITE: Final = "loom.write_stream"
CLOSE: Final = "loom.close_stream"
STRIDE: Final = 64
MAX_LIMIT: Final = 1_000
"""The most values one read answers."""


# -- the fold -----------------------------------------------------------------------------


def _stream(s: ExecutionState, key: str) -> dict[str, Any]:
    found = s.streams.get(key)
    if found is None:
        found = s.streams[key] = {"count": 0, "closed": False, "marks": []}
    return found


def _written(s: ExecutionState, e: ev.StreamWritten) -> None:
    st = _stream(s, e.key)
    if st["count"] % STRIDE == 0:
        st["marks"].append([e.seq, st["count"]])
    st["count"] += 1


def _closed(s: ExecutionState, e: ev.StreamClosed) -> None:
    _stream(s, e.key)["closed"] = True


def _written_step(s: ExecutionState, e: ev.StreamWritten) -> None:
    s.steps[e.step_id] = {"effect": WRITE, "status": "completed", "seq": e.seq}


def _closed_step(s: ExecutionState, e: ev.StreamClosed) -> None:
    s.steps[e.step_id] = {"effect": CLOSE, "status": "completed", "seq": e.seq}


# -- the flow's side ------------------------------------------------------------------------


async def _step(session: Session, step_id: str, record: str, what: str, event: Any) -> None:
    """Append ``event()`` once at ``step_id``, serve the record on replay."""
    if session.signal is not None:
        raise session.signal
    rec = session.state.steps.get(step_id)
    if rec is None:
        session._check_unused(step_id, what)  # pyright: ignore[reportPrivateUsage]
        await cancellation.checkpoint(session)  # a new step: a pending cancel arrives here
        with off_scope():
            built = await event()
            if session.signal is not None:
                raise session.signal
            await session.append([built])
            if record == WRITE:
                crash.point("after_stream_written", step_id)
        rec = session.state.steps[step_id]
    elif rec.get("effect") != record:
        session._park(  # pyright: ignore[reportPrivateUsage]
            step_id, f"step {step_id}: log has effect {rec.get('effect')!r}, flow called {what}"
        )
    visit(session, step_id)
    await session._turn(rec.get("seq", 0))  # pyright: ignore[reportPrivateUsage]


async def write_stream(session: Session, step_id: str, key: str, value: Any) -> None:
    """The session side of ``ctx.write_stream`` (see the module docstring)."""
    check_key(key)
    json_value = handlers.as_json(value, f"a value of stream {key!r}")

    async def written() -> ev.StreamWritten:
        state = session.state
        if state.streams.get(key, {}).get("closed"):
            raise StreamClosedError(
                f"stream {key!r} of {state.execution_id!r} is closed", details={"key": key}
            )
        held = sum(st["count"] for st in state.streams.values())
        bound = for_state(session.rt.app, state).value("max_stream_values")
        if held >= bound:
            raise exceeded("max_stream_values", bound, held, f"value for stream {key!r} refused")
        stored, _ = await session._unless_store_fails(  # pyright: ignore[reportPrivateUsage]
            session.rt.payloads.encode(json_value, f"{state.execution_id}/stream")
        )
        return ev.StreamWritten(step_id=step_id, key=key, value=stored)

    await _step(session, step_id, WRITE, f"write_stream({key!r})", written)


async def close_stream(session: Session, step_id: str, key: str) -> None:
    """The session side of ``ctx.close_stream``."""
    check_key(key)

    async def closed() -> ev.StreamClosed:
        return ev.StreamClosed(step_id=step_id, key=key)

    await _step(session, step_id, CLOSE, f"close_stream({key!r})", closed)


class StreamsContext(FlowContext):
    """The ``ctx`` methods of streams."""

    __slots__ = ()

    async def write_stream(self, key: str, value: Any) -> None:
        """Add ``value`` to the stream ``key`` for readers to read while the flow goes on (a
        step; see :mod:`loom.primitives.streams`).

        Raises:
            StreamClosedError: The flow closed that stream.
            LimitExceededError: The execution's streams hold ``max_stream_values`` values.
        """
        await write_stream(self._session, next_step_id(self), key, value)

    async def close_stream(self, key: str) -> None:
        """Close the stream ``key``: its readers have every value it will hold (a step)."""
        await close_stream(self._session, next_step_id(self), key)


# -- the readers' side ----------------------------------------------------------------------


class StreamChunk(BaseModel):
    """What one read of a stream answers.

    Attributes:
        execution_id: The execution.
        key: The stream.
        offset: The offset of the first value.
        values: The values from ``offset`` on, in order.
        next_offset: Where the next read goes on (``offset + len(values)``).
        closed: No value will come after ``next_offset`` (closed by the flow, or its
            execution ended).
    """

    execution_id: str
    key: str
    offset: int
    values: list[Any]
    next_offset: int
    closed: bool


def _check_read(offset: int, limit: int, timeout: float) -> None:
    if type(offset) is not int or offset < 0:
        raise InputError(f"offset must be a whole number >= 0, got {offset!r}")
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    if not 0 <= timeout <= MAX_WAIT:  # also refuses NaN
        raise InputError(f"timeout must be between 0 and {MAX_WAIT} seconds, got {timeout!r}")


async def read_stream(
    rt: Runtime,
    execution_id: str,
    key: str,
    offset: int = 0,
    *,
    limit: int = 100,
    timeout: float = 0.0,
) -> StreamChunk:
    """The values of stream ``key`` from ``offset`` on (at most ``limit``), waiting up to
    ``timeout`` seconds (at most :data:`~loom.primitives.published.MAX_WAIT`) for one.

    Raises:
        UnknownExecutionError: No such execution.
        InputError: A bad key, offset, limit or timeout.
    """
    eid, key = check_execution_id(execution_id), check_key(key)
    _check_read(offset, limit, timeout)
    seen = (await rt.require(eid)).last_seq
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        state = await rt.load_state(eid)
        st = state.streams.get(key, {"count": 0, "closed": False, "marks": []})
        over = bool(st["closed"]) or state.finished
        if st["count"] > offset or over or loop.time() >= deadline:
            break
        seen = max(seen, state.last_seq)
        await log_grew(rt, eid, seen, deadline)
    values = await _values(rt, eid, key, st, offset, min(limit, st["count"] - offset))
    after = offset + len(values)
    return StreamChunk(
        execution_id=eid,
        key=key,
        offset=offset,
        values=values,
        next_offset=after,
        closed=over and after >= st["count"],
    )


async def _values(
    rt: Runtime, eid: str, key: str, st: dict[str, Any], offset: int, count: int
) -> list[Any]:
    """``count`` values of the stream from ``offset``, read from the log."""
    if count <= 0:
        return []
    seq, at = 1, 0
    for mark_seq, mark_offset in st["marks"]:
        if mark_offset > offset:
            break
        seq, at = mark_seq, mark_offset
    values: list[Any] = []
    for event in await rt.store.read(eid, after_seq=seq - 1):
        if not isinstance(event, ev.StreamWritten) or event.key != key:
            continue
        if at >= offset:
            values.append(await rt.payloads.decode(event.value, eid))
            if len(values) == count:
                break
        at += 1
    return values


async def stream(
    rt: Runtime, execution_id: str, key: str, offset: int = 0, *, wait: float = MAX_WAIT
) -> AsyncIterator[Any]:
    """Every value of stream ``key`` from ``offset`` on, as they come, until the stream is
    over (closed, or its execution ended); each wait for more lasts up to ``wait`` seconds
    and is then taken up again."""
    while True:
        chunk = await read_stream(rt, execution_id, key, offset, limit=MAX_LIMIT, timeout=wait)
        for value in chunk.values:
            yield value
        offset = chunk.next_offset
        if chunk.closed:
            return


PRIMITIVE = Primitive(
    "streams",
    head={"StreamWritten": _written, "StreamClosed": _closed},
    step={"StreamWritten": _written_step, "StreamClosed": _closed_step},
    context=StreamsContext,
)
