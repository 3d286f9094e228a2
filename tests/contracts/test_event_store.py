"""The ``EventStore`` contract, run unchanged against every backend (see conftest)."""

from __future__ import annotations

import asyncio

import pytest

from loom.errors import AppendConflictError, InvalidExecutionIdError, UnknownExecutionError
from loom.events import (
    EffectCompleted,
    Event,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionStarted,
)
from loom.store import AppendRequest, EventStore, Snapshot, StatusChange
from loom.store.base import LIVE_STATUSES
from tests.contracts.id_corpus import INVALID, VALID


def started(eid: str = "e1", flow: str = "f", payload: object = None) -> ExecutionStarted:
    return ExecutionStarted(execution_id=eid, flow=flow, input=payload or {"n": 1})


def step(seq: int, step_id: str = "1", output: object = None) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output=output, at=1.0)


async def test_create_writes_seq_one(store: EventStore) -> None:
    created, first = await store.create(started())
    assert created is True
    assert first.seq == 1
    events = await store.read("e1")
    assert [e.type for e in events] == ["ExecutionStarted"]
    assert events[0] == first


async def test_create_is_idempotent_and_returns_the_stored_start(store: EventStore) -> None:
    await store.create(started(payload={"n": 1}))
    created, stored = await store.create(started(payload={"n": 2}))
    assert created is False
    assert stored.input == {"n": 1}
    assert len(await store.read("e1")) == 1


async def test_append_grows_the_log_gap_free(store: EventStore) -> None:
    await store.create(started())
    last = await store.append(AppendRequest("e1", 1, [step(2, "1"), step(3, "2")]))
    assert last == 3
    last = await store.append(AppendRequest("e1", 3, [step(4, "3", {"x": [1, 2]})]))
    assert last == 4
    events = await store.read("e1")
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert isinstance(events[3], EffectCompleted)
    assert events[3].output == {"x": [1, 2]}


async def test_append_at_a_stale_seq_conflicts_and_writes_nothing(store: EventStore) -> None:
    await store.create(started())
    await store.append(AppendRequest("e1", 1, [step(2)]))
    with pytest.raises(AppendConflictError):
        await store.append(AppendRequest("e1", 1, [step(2, "other")]))
    with pytest.raises(AppendConflictError):
        await store.append(AppendRequest("e1", 5, [step(6)]))
    events = await store.read("e1")
    assert [e.seq for e in events] == [1, 2]
    assert isinstance(events[1], EffectCompleted) and events[1].step_id == "1"


async def test_a_conflicting_batch_is_written_not_at_all(store: EventStore) -> None:
    await store.create(started())
    await store.append(AppendRequest("e1", 1, [step(2)]))
    with pytest.raises(AppendConflictError):
        await store.append(AppendRequest("e1", 1, [step(2), step(3), step(4)]))
    assert len(await store.read("e1")) == 2


async def test_misnumbered_events_are_refused(store: EventStore) -> None:
    await store.create(started())
    with pytest.raises(ValueError, match="seq"):
        await store.append(AppendRequest("e1", 1, [step(3)]))
    assert len(await store.read("e1")) == 1


async def test_racing_appends_exactly_one_wins_per_seq(store: EventStore) -> None:
    await store.create(started())

    async def racer(name: str) -> str:
        expected = 1
        for _ in range(50):
            try:
                await store.append(AppendRequest("e1", expected, [step(expected + 1, name)]))
                return name
            except AppendConflictError:
                expected = (await store.summary("e1")).last_seq
        raise AssertionError("never won")

    winners = await asyncio.gather(*(racer(f"r{i}") for i in range(5)))
    events = await store.read("e1")
    assert sorted(winners) == [f"r{i}" for i in range(5)]
    assert [e.seq for e in events] == list(range(1, 7))
    assert sorted(e.step_id for e in events[1:] if isinstance(e, EffectCompleted)) == sorted(
        winners
    )


async def test_unknown_execution(store: EventStore) -> None:
    with pytest.raises(UnknownExecutionError):
        await store.load("nope")
    with pytest.raises(UnknownExecutionError):
        await store.read("nope")
    with pytest.raises(UnknownExecutionError):
        await store.append(AppendRequest("nope", 0, [step(1)]))
    with pytest.raises(UnknownExecutionError):
        await store.summary("nope")


async def test_load_returns_snapshot_and_tail(store: EventStore) -> None:
    await store.create(started())
    await store.append(AppendRequest("e1", 1, [step(2, "1"), step(3, "2")]))
    loaded = await store.load("e1")
    assert loaded.snapshot is None and [e.seq for e in loaded.events] == [1, 2, 3]
    await store.save_snapshot("e1", Snapshot(3, '{"at": 3}'))
    await store.append(AppendRequest("e1", 3, [step(4, "3")]))
    loaded = await store.load("e1")
    assert loaded.snapshot == Snapshot(3, '{"at": 3}')
    assert [e.seq for e in loaded.events] == [4]
    assert loaded.last_seq == 4


async def test_snapshot_never_ahead_and_never_older(store: EventStore) -> None:
    await store.create(started())
    await store.append(AppendRequest("e1", 1, [step(2), step(3, "2")]))
    with pytest.raises(ValueError):
        await store.save_snapshot("e1", Snapshot(9, "{}"))
    await store.save_snapshot("e1", Snapshot(3, "new"))
    await store.save_snapshot("e1", Snapshot(2, "old"))
    loaded = await store.load("e1")
    assert loaded.snapshot == Snapshot(3, "new")
    assert loaded.events == []
    assert loaded.last_seq == 3


async def test_summary_and_list_by_status(store: EventStore) -> None:
    await store.create(started("a"))
    await store.create(started("b"))
    await store.create(started("c"))
    await store.append(
        AppendRequest("a", 1, [ExecutionCompleted(seq=2, output=1)], StatusChange("completed"))
    )
    await store.append(
        AppendRequest(
            "b",
            1,
            [ExecutionClaimed(seq=2, holder="h", until=5.0)],
            StatusChange("suspended", wake_at=100.0),
        )
    )
    summary = await store.summary("a")
    assert (summary.status, summary.last_seq, summary.flow) == ("completed", 2, "f")
    assert {s.execution_id for s in await store.list("completed")} == {"a"}
    assert {s.execution_id for s in await store.list("running")} == {"c"}
    assert {s.execution_id for s in await store.list()} == {"a", "b", "c"}
    due = await store.list(due_before=100.0)
    assert [(s.execution_id, s.wake_at) for s in due] == [("b", 100.0)]
    assert await store.list(due_before=99.0) == []


async def test_summaries_carry_the_flow_version_recorded_at_the_start(store: EventStore) -> None:
    await store.create(started("v1"))
    await store.create(started("v2").model_copy(update={"flow_version": "2"}))
    assert (await store.summary("v1")).flow_version == "1"
    assert (await store.summary("v2")).flow_version == "2"
    versions = {s.execution_id: s.flow_version for s in await store.list()}
    assert versions == {"v1": "1", "v2": "2"}
    assert {s.flow_version for s in await store.scan(LIVE_STATUSES)} == {"1", "2"}


async def test_scan_pages_through_executions_with_the_statuses_asked(store: EventStore) -> None:
    ids = [f"x{i:02d}" for i in range(12)]
    for eid in reversed(ids):  # creation order must not matter: pages go by id
        await store.create(started(eid))
    for eid in ids[::4]:
        done = ExecutionCompleted(seq=2, output=None)
        await store.append(AppendRequest(eid, 1, [done], StatusChange("completed")))
    for eid in ids[1::4]:
        await store.append(
            AppendRequest(
                eid, 1, [ExecutionClaimed(seq=2, holder="h", until=1.0)], StatusChange("suspended")
            )
        )
    seen: list[str] = []
    after = None
    while True:
        page = await store.scan(LIVE_STATUSES, after=after, limit=3)
        assert len(page) <= 3
        seen.extend(s.execution_id for s in page)
        if len(page) < 3:
            break
        after = page[-1].execution_id
    live = [eid for eid in ids if eid not in ids[::4]]
    assert seen == live
    suspended = await store.scan(["suspended"])
    assert [(s.execution_id, s.status) for s in suspended] == [(e, "suspended") for e in ids[1::4]]
    assert await store.scan(["completed"], after=ids[-1]) == []
    assert await store.scan([]) == []


async def test_load_many_equals_load_of_each_in_the_order_asked(store: EventStore) -> None:
    for eid in ("a", "b", "c"):
        await store.create(started(eid))
    # a: events after its last status change (the summary's last_seq may lag them)
    await store.append(AppendRequest("a", 1, [step(2)], StatusChange("suspended")))
    await store.append(AppendRequest("a", 2, [step(3, "2"), step(4, "3")]))
    # b: a snapshot, then a tail
    await store.append(AppendRequest("b", 1, [step(2), step(3, "2")], StatusChange("running")))
    await store.save_snapshot("b", Snapshot(3, '{"at": 3}'))
    await store.append(AppendRequest("b", 3, [step(4, "3")]))
    loaded = await store.load_many(["c", "a", "b"])
    assert loaded == [await store.load(eid) for eid in ("c", "a", "b")]
    assert [log.last_seq for log in loaded] == [1, 4, 4]
    assert loaded[2].snapshot == Snapshot(3, '{"at": 3}')
    assert await store.load_many([]) == []
    with pytest.raises(UnknownExecutionError):
        await store.load_many(["a", "nope"])


async def test_status_is_untouched_by_appends_without_a_change(store: EventStore) -> None:
    await store.create(started())
    await store.append(AppendRequest("e1", 1, [step(2)], StatusChange("suspended", wake_at=7.0)))
    await store.append(AppendRequest("e1", 2, [step(3, "2")]))
    summary = await store.summary("e1")
    assert (summary.status, summary.wake_at, summary.last_seq) == ("suspended", 7.0, 3)


async def test_every_event_type_round_trips(store: EventStore) -> None:
    from loom import events as ev

    await store.create(started())
    batch: list[Event] = [
        ev.ExecutionClaimed(holder="h", until=2.5),
        ev.EffectStarted(step_id="1", effect="pay", idempotency_key="e1:1"),
        ev.EffectInDoubt(step_id="1", effect="pay"),
        ev.EffectVerdict(step_id="1", verdict="performed", output={"r": 1}, by="ops"),
        ev.EffectFailed(step_id="2", effect="x", error=ev.ErrorInfo(code="timeout", message="t")),
        ev.DecisionRecorded(step_id="3", kind="uuid", value="u"),
        ev.PatchRecorded(change_id="send-receipt", step_id="4", deprecated=True),
        ev.ExecutionSuspended(step_id="4", on="approval", correlation_key="k", wake_at=9.0),
        ev.ExecutionResumed(on="approval", correlation_key="k", payload={"ok": True}),
        ev.ExecutionParked(reason="nondeterminism", step_id="5"),
        ev.ExecutionFailed(error=ev.ErrorInfo(message="boom")),
    ]
    numbered = [e.model_copy(update={"seq": i}) for i, e in enumerate(batch, start=2)]
    await store.append(AppendRequest("e1", 1, numbered))
    assert (await store.read("e1"))[1:] == numbered
    assert (await store.read("e1", after_seq=10)) == numbered[9:]


async def test_unicode_and_large_values_survive(store: EventStore) -> None:
    await store.create(started(payload={"name": "Zoë — 東京", "blob": "x" * 100_000}))
    loaded = await store.load("e1")
    first = loaded.events[0]
    assert isinstance(first, ExecutionStarted)
    assert first.input == {"name": "Zoë — 東京", "blob": "x" * 100_000}


async def test_append_before_the_first_event_conflicts(store: EventStore) -> None:
    await store.create(started())
    with pytest.raises(AppendConflictError):
        await store.append(AppendRequest("e1", 0, [step(1)]))
    events = await store.read("e1")
    assert [e.type for e in events] == ["ExecutionStarted"]


async def test_snapshot_of_an_unknown_execution(store: EventStore) -> None:
    with pytest.raises(UnknownExecutionError):
        await store.save_snapshot("nope", Snapshot(1, "{}"))


async def test_a_snapshot_over_a_mebibyte_round_trips(store: EventStore) -> None:
    import secrets

    await store.create(started())
    await store.append(AppendRequest("e1", 1, [step(2)]))
    state = '{"steps": "' + secrets.token_hex(1_500_000) + '"}'  # 3 MB, barely compressible
    await store.save_snapshot("e1", Snapshot(2, state))
    loaded = await store.load("e1")
    assert loaded.snapshot == Snapshot(2, state)
    assert loaded.events == [] and loaded.last_seq == 2


@pytest.mark.parametrize("eid", VALID, ids=range(len(VALID)))
async def test_a_valid_id_round_trips_byte_for_byte(store: EventStore, eid: str) -> None:
    created, first = await store.create(started(eid))
    assert created and first.execution_id == eid
    await store.append(AppendRequest(eid, 1, [step(2)], StatusChange("suspended", wake_at=5.0)))
    await store.save_snapshot(eid, Snapshot(2, "{}"))
    events = await store.read(eid)
    assert [e.seq for e in events] == [1, 2]
    head = events[0]
    assert isinstance(head, ExecutionStarted)
    assert head.execution_id.encode() == eid.encode()
    assert (await store.load(eid)).snapshot == Snapshot(2, "{}")
    assert (await store.summary(eid)).execution_id.encode() == eid.encode()
    assert [s.execution_id for s in await store.list("suspended")] == [eid]
    again, _ = await store.create(started(eid))
    assert again is False


@pytest.mark.parametrize("eid", INVALID, ids=range(len(INVALID)))
async def test_an_invalid_id_is_refused_by_every_method_and_nothing_is_written(
    store: EventStore, eid: str
) -> None:
    calls = [
        lambda: store.create(started(eid)),
        lambda: store.append(AppendRequest(eid, 1, [step(2)])),
        lambda: store.load(eid),
        lambda: store.read(eid),
        lambda: store.save_snapshot(eid, Snapshot(1, "{}")),
        lambda: store.summary(eid),
    ]
    for call in calls:
        with pytest.raises(InvalidExecutionIdError) as info:
            await call()
        assert "the rule" in info.value.message
    assert await store.list() == []


async def test_ping_answers_on_a_working_store(store: EventStore) -> None:
    await store.ping()  # empty store
    await store.create(started())
    await store.ping()
    assert [s.execution_id for s in await store.list()] == ["e1"]  # a check writes nothing


async def test_an_append_may_carry_the_snapshot_after_it(store: EventStore) -> None:
    await store.create(started())
    await store.append(AppendRequest("e1", 1, [step(2)]))
    done = ExecutionCompleted(seq=3, output={"ok": True}, at=1.0)
    request = AppendRequest("e1", 2, [done], StatusChange("completed"), snapshot='{"at": 3}')
    assert await store.append(request) == 3
    loaded = await store.load("e1")
    assert loaded.last_seq == 3
    if store.keeps_append_snapshots:
        assert loaded.snapshot == Snapshot(3, '{"at": 3}') and loaded.events == []
    else:  # ignored: the caller saves snapshots itself
        assert loaded.snapshot is None and [e.seq for e in loaded.events] == [1, 2, 3]
    assert (await store.summary("e1")).status == "completed"
    # An older snapshot saved afterwards never replaces the one that rode the append.
    await store.save_snapshot("e1", Snapshot(2, "old"))
    assert (await store.load("e1")).last_seq == 3
    if store.keeps_append_snapshots:
        assert (await store.load("e1")).snapshot == Snapshot(3, '{"at": 3}')
