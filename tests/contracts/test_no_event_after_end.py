"""The ``EventStore`` contract: nothing follows a terminal event (every backend, see conftest).

An append to a log whose last event is ``ExecutionCompleted``, ``ExecutionFailed`` or
``ExecutionCancelled`` raises ``LogEndedError`` (an ``AppendConflictError``, so callers reload
and decide again) and writes nothing: whoever appends (the store object that wrote the end,
another process's, a fenced control append or takeover claim, a plain one) and however the
end was written (an append, ``create``'s ``then``, or on Firestore the holder's end riding
the execution document, which no page collides with). ``peer`` is another store object over
the same data (the memory store is its own).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from loom.errors import AppendConflictError, LogEndedError
from loom.events import (
    EffectCompleted,
    ErrorInfo,
    Event,
    ExecutionCancelled,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionResumed,
    ExecutionStarted,
)
from loom.store import AppendRequest, EventStore, StatusChange
from loom.store.base import ENDING_STATUS

ENDINGS: list[Event] = [
    ExecutionCompleted(output={"ok": True}),
    ExecutionFailed(error=ErrorInfo(message="boom")),
    ExecutionCancelled(reason="stop", by="ops"),
]


def started(eid: str = "e1") -> ExecutionStarted:
    return ExecutionStarted(execution_id=eid, flow="f", input={"n": 1})


def at(event: Event, seq: int) -> Event:
    return event.model_copy(update={"seq": seq, "at": 1.0})


def claim(seq: int, holder: str = "h1") -> ExecutionClaimed:
    return ExecutionClaimed(seq=seq, holder=holder, until=time.time() + 60, at=time.time())


def step(seq: int, step_id: str = "s") -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output=seq, at=1.0)


def resumed(seq: int, key: str = "k") -> ExecutionResumed:
    return ExecutionResumed(seq=seq, on="gate", correlation_key=key, at=1.0)


def done(seq: int, output: object = "done") -> ExecutionCompleted:
    return ExecutionCompleted(seq=seq, output=output, at=1.0)


def after_end(seq: int) -> list[tuple[list[Event], StatusChange | None]]:
    """What writers try to append after an end at ``seq - 1``: a step, a resume, a claim
    that wakes the execution, a second end."""
    return [
        ([step(seq)], None),
        ([resumed(seq)], StatusChange("running")),
        ([claim(seq, "late")], StatusChange("running")),
        ([done(seq, "twice")], StatusChange("completed")),
    ]


async def held_then_ended(store: EventStore, ending: Event, eid: str = "e1") -> list[Event]:
    """Start ``eid``, claim it, and end it with the holder's last step: the log ends at 4."""
    await store.create(started(eid), [claim(2)])
    await store.load(eid)  # the holder loads before it appends, as the runtime does
    status = StatusChange(ENDING_STATUS[ending.type])
    await store.append(AppendRequest(eid, 2, [step(3, "last"), at(ending, 4)], status))
    return await store.read(eid)


async def refused_everywhere(
    writers: list[EventStore], eid: str, expected: int, log: list[Event]
) -> None:
    """Every kind of append at the end, fenced or not, from every writer: refused, and the
    log and its summary stay as they were."""
    for writer in writers:
        for events, status in after_end(expected + 1):
            for fence in (False, True):
                request = AppendRequest(eid, expected, events, status, fence=fence)
                with pytest.raises(LogEndedError):
                    await writer.append(request)
        assert await writer.read(eid) == log
        assert (await writer.summary(eid)).last_seq == expected


@pytest.mark.parametrize("ending", ENDINGS, ids=lambda e: e.type)
async def test_nothing_follows_a_terminal_event(
    store: EventStore, peer: EventStore, ending: Event
) -> None:
    log = await held_then_ended(store, ending)
    assert [e.type for e in log][-1] == ending.type
    await refused_everywhere([store, peer], "e1", 4, log)
    assert (await peer.summary("e1")).status == ENDING_STATUS[ending.type]
    assert issubclass(LogEndedError, AppendConflictError)  # callers' conflict handling


async def test_writers_that_never_saw_the_end_are_refused(
    store: EventStore, peer: EventStore
) -> None:
    """A zombie (the first holder, taken over from) and a late second taker loaded the log
    before the end landed: what they remember says nothing of the end, and their appends
    at the positions they loaded are refused all the same."""
    await store.create(started(), [claim(2, "zombie")])
    await peer.load("e1")  # the zombie's view, and the late taker's
    await store.load("e1")
    assert await store.append(AppendRequest("e1", 2, [claim(3, "h2")], fence=True)) == 3
    await store.append(AppendRequest("e1", 3, [step(4), done(5)], StatusChange("completed")))
    log = await store.read("e1")
    with pytest.raises(AppendConflictError):  # the late taker's claim (fenced)
        await peer.append(AppendRequest("e1", 2, [claim(3, "h3")], fence=True))
    with pytest.raises(AppendConflictError):  # the zombie's next step (the holder's kind)
        await peer.append(AppendRequest("e1", 2, [step(3, "zombie")]))
    await refused_everywhere([peer, store], "e1", 5, log)


@pytest.mark.parametrize("ending", ENDINGS, ids=lambda e: e.type)
async def test_a_create_whose_events_end_the_log_is_finished(
    store: EventStore, peer: EventStore, ending: Event
) -> None:
    created, _ = await store.create(started(), [claim(2), at(ending, 3)])
    assert created
    summary = await peer.summary("e1")
    assert (summary.status, summary.last_seq) == (ENDING_STATUS[ending.type], 3)
    await refused_everywhere([store, peer], "e1", 3, await store.read("e1"))


async def test_a_terminal_event_sent_without_its_status_still_ends_the_log(
    store: EventStore, peer: EventStore
) -> None:
    await store.create(started())
    failed = at(ENDINGS[1], 2)
    assert await store.append(AppendRequest("e1", 1, [failed], StatusChange("suspended"))) == 2
    assert (await peer.summary("e1")).status == "failed"
    await refused_everywhere([store, peer], "e1", 2, await store.read("e1"))


async def test_an_event_after_a_terminal_one_in_one_batch_is_refused(store: EventStore) -> None:
    await store.create(started(), [claim(2)])
    with pytest.raises(ValueError, match="nothing may follow"):
        await store.append(AppendRequest("e1", 2, [done(3), step(4)], StatusChange("completed")))
    with pytest.raises(ValueError, match="nothing may follow"):
        await store.create(started("e2"), [done(2), step(3)])
    assert [e.seq for e in await store.read("e1")] == [1, 2]
    assert (await store.summary("e1")).status == "running"
    assert await store.append(AppendRequest("e1", 2, [step(3)])) == 3  # nothing half-written


async def test_a_finished_status_alone_does_not_end_the_log(
    store: EventStore, peer: EventStore
) -> None:
    """A summary may be finished with a log that goes on (a commission's closed case
    stream records what was refused after it closed): only a terminal event ends a log."""
    await store.create(started())
    await store.load("e1")
    closing = AppendRequest("e1", 1, [resumed(2, "closed")], StatusChange("completed"), fence=True)
    assert await store.append(closing) == 2
    assert await store.append(AppendRequest("e1", 2, [resumed(3, "refused")])) == 3
    assert await peer.append(AppendRequest("e1", 3, [resumed(4, "late")], fence=True)) == 4
    assert (await peer.summary("e1")).status == "completed"
    assert [e.seq for e in await store.read("e1")] == [1, 2, 3, 4]


async def test_racing_appenders_after_the_end_are_all_refused(
    store: EventStore, peer: EventStore
) -> None:
    log = await held_then_ended(store, ENDINGS[0])
    requests = [
        AppendRequest("e1", 4, events, status, fence=fence)
        for events, status in after_end(5)
        for fence in (False, True)
    ]
    writers = [store, peer] * len(requests)
    outcomes = await asyncio.gather(
        *(w.append(r) for w, r in zip(writers, requests * 2, strict=False)),
        return_exceptions=True,
    )
    assert all(isinstance(o, LogEndedError) for o in outcomes), outcomes
    assert await peer.read("e1") == log


ROUNDS = 8


async def test_an_end_racing_other_writers_at_its_position_leaves_one_log(
    store: EventStore, peer: EventStore
) -> None:
    """The holder's end, takeover claims and a resume (fenced, from this store object and
    another), all at one position at once: exactly one lands, and when the end did, every
    later append is refused. Each round, the writers load first, as the runtime does (so
    Firestore's end may ride the execution document). Only the holder appends unfenced:
    every other writer at its position fences (``AppendRequest.fence``)."""
    ended = 0
    for n in range(ROUNDS):
        eid = f"r{n}"
        await store.create(started(eid), [claim(2)])
        await asyncio.gather(store.load(eid), peer.load(eid))
        end = AppendRequest(eid, 2, [step(3, "last"), done(4)], StatusChange("completed"))
        others = [
            (store, AppendRequest(eid, 2, [claim(3, "h2")], fence=True)),
            (peer, AppendRequest(eid, 2, [claim(3, "h3")], fence=True)),
            (peer, AppendRequest(eid, 2, [resumed(3)], StatusChange("running"), fence=True)),
        ]
        racers = [(store, end), *(others[n % 3 :] + others[: n % 3])]
        outcomes = await asyncio.gather(*(w.append(r) for w, r in racers), return_exceptions=True)
        landed = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(landed) == 1, outcomes
        assert all(isinstance(o, AppendConflictError) for o in outcomes if o not in landed)
        log = await peer.read(eid)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert sum(e.type == "ExecutionCompleted" for e in log) <= 1
        assert await store.read(eid) == log
        if log[-1].type == "ExecutionCompleted":
            ended += 1
            await refused_everywhere([store, peer], eid, len(log), log)
    assert ended >= 1  # the end won at least once (it goes first in every round)
