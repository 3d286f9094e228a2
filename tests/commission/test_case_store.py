"""Cases are event-sourced streams on any ``EventStore``: memory, SQLite and Firestore alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from loom.commission import (
    CaseConflictError,
    CaseNotFoundError,
    CaseStore,
    CommissionError,
    NoUsefulAction,
    Pending,
    ProposedAction,
)
from loom.commission.events import CaseRevised
from loom.commission.store import CASE_FLOW, stream_id
from loom.events import ExecutionResumed, ExecutionStarted
from loom.store import AppendRequest, EventStore, SqliteEventStore
from tests.commission.helpers import CHANGE, ScriptedPort, draft, make_runtime, open_case, scripted


async def test_open_is_idempotent_and_a_different_definition_conflicts(
    event_store: EventStore,
) -> None:
    cases = CaseStore(event_store)
    first = await cases.open("c", draft(), frontier=[CHANGE], subject={"n": 1})
    again = await cases.open("c", draft(), frontier=[CHANGE], subject={"n": 1})
    assert first == again
    assert (first.revision, first.frontier, first.commission.state.kind) == (0, (CHANGE,), "draft")

    with pytest.raises(CaseConflictError):
        await cases.open("c", draft(), frontier=[CHANGE], subject={"n": 2})


async def test_a_case_id_used_by_an_execution_conflicts(event_store: EventStore) -> None:
    await event_store.create(ExecutionStarted(execution_id=stream_id("c"), flow="orders"))
    with pytest.raises(CaseConflictError):
        await CaseStore(event_store).open("c", draft())


async def test_appends_are_fenced_on_the_stream_position(event_store: EventStore) -> None:
    cases = CaseStore(event_store)
    state = await open_case(cases, "c")
    await cases.append(state, [CaseRevised(frontier=(CHANGE,))])

    with pytest.raises(CaseConflictError):  # a writer still at `state` is overtaken
        await cases.append(state, [CaseRevised(frontier=())])
    with pytest.raises(CaseConflictError):
        await cases.revise("c", expected_revision=0)
    assert (await cases.revise("c", expected_revision=1, frontier=[])).revision == 2


async def test_a_case_stream_is_suspended_so_no_sweeper_dispatches_it(
    event_store: EventStore,
) -> None:
    cases = CaseStore(event_store)
    await open_case(cases, "c")
    summary = await event_store.summary(stream_id("c"))
    assert (summary.flow, summary.status, summary.wake_at) == (CASE_FLOW, "suspended", None)
    assert stream_id("c") not in [r.execution_id for r in await event_store.list("running")]

    closed = await cases.close("c", "done")
    assert closed.commission.state.kind == "closed"
    assert (await event_store.summary(stream_id("c"))).status == "completed"


async def test_a_run_is_recorded_on_every_backend(event_store: EventStore) -> None:
    cases = CaseStore(event_store)
    await open_case(cases, "c")
    executor, _ = scripted(ProposedAction(action_id=CHANGE), NoUsefulAction())
    report = await make_runtime(cases, [ScriptedPort()]).run_until_blocked("c", executor)

    assert report.revision == 1
    reloaded = await CaseStore(event_store).load("c")
    assert reloaded.revision == 1 and reloaded.steps == 2
    assert reloaded.last is not None and reloaded.last.kind == "performed"


async def test_unknown_cases_and_invalid_transitions(event_store: EventStore) -> None:
    cases = CaseStore(event_store)
    with pytest.raises(CaseNotFoundError):
        await cases.load("nope")
    await open_case(cases, "c")  # assigned
    with pytest.raises(CommissionError, match="only a draft commission"):
        await cases.assign("c", "someone-else")


async def test_events_that_are_not_case_events_are_skipped(event_store: EventStore) -> None:
    cases = CaseStore(event_store)
    state = await open_case(cases, "c")
    stray = ExecutionResumed(seq=state.seq + 1, on="approval", correlation_key="x", payload=1)
    await event_store.append(AppendRequest(stream_id("c"), state.seq, [stray]))

    reloaded = await cases.load("c")
    assert reloaded.seq == state.seq + 1
    assert reloaded.model_copy(update={"seq": state.seq}) == state


async def test_a_case_and_its_pending_request_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    store = SqliteEventStore(path)
    cases = CaseStore(store)
    await open_case(cases, "c")
    port = ScriptedPort([Pending(reason="queued")])
    executor, _ = scripted(ProposedAction(action_id=CHANGE), NoUsefulAction())
    await make_runtime(cases, [port], max_iterations=1).run_until_blocked("c", executor)
    await store.aclose()

    reopened = CaseStore(SqliteEventStore(path))
    state = await reopened.load("c")
    assert state.open_request is not None and state.open_request.status == "pending"
    report = await make_runtime(reopened, [port]).run_until_blocked("c", executor)
    assert report.performed == ("c:0:1",) and report.revision == 1
