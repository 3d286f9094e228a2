"""The fixed cost of one execution takes shortcuts where a fresh execution has nothing to do;
each shortcut gives what the long way gives, and the long way is still taken where it has
work (in-memory store: what is pinned here is the engine's own bookkeeping)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from loom import EffectContext, FlowContext, Loom, wire
from loom import events as ev
from loom.kernel import cancellation, claims, starts
from loom.kernel.fold import ExecutionState, fold
from loom.kernel.ordering import recorded_outcomes
from loom.kernel.payloads import ESCAPE_KEY, PayloadCodec, completion_event, completion_inline
from loom.kernel.session import Session
from loom.runtime import Runtime
from loom.store import InMemoryEventStore
from loom.wire import ExecutionPackage, ExecutionResult

app = Loom("fixed-cost")
_release: list[asyncio.Event] = []  # entered, release (made in the test: events belong
# to one loop)
_seen: list[int] = []


@app.effect("double")
async def double(ctx: EffectContext, n: int) -> int:
    return 2 * n


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.execute(double, i)
    if n > 1:
        await ctx.suspend("go", "k")
    return total


@app.flow("echo")
async def echo(ctx: FlowContext, value: Any) -> Any:
    return value


@app.flow("held")
async def held(ctx: FlowContext, n: int) -> int:
    _seen.append(len(cancellation._SESSIONS))  # pyright: ignore[reportPrivateUsage]
    _release[0].set()
    await _release[1].wait()
    return n


def _slow_outcomes(state: ExecutionState) -> list[float]:
    """``recorded_outcomes`` as it was, with no shortcut for an empty state."""
    seqs: list[float] = [
        rec.get("seq", 0)
        for rec in state.steps.values()
        if rec.get("status") in ("completed", "failed")
    ]
    seqs.extend(r.get("seq", 0) for r in state.resumes.values())
    return seqs


async def test_recorded_outcomes_shortcut_agrees_with_the_long_way() -> None:
    rt = Runtime(app, InMemoryEventStore())
    await rt.start("steps", 0, execution_id="empty")
    await rt.start("steps", 3, execution_id="stepped")
    await rt.resume("stepped", "go", "k", None)
    fresh = fold([])
    empty, stepped = await rt.load_state("empty"), await rt.load_state("stepped")
    for state in (fresh, empty, stepped):
        assert recorded_outcomes(state) == _slow_outcomes(state)
        assert cancellation.outcomes(state) == _slow_outcomes(state)
    assert len(recorded_outcomes(stepped)) == 4  # three completions and the resume
    stepped.cancel = {"delivered": 7.5}  # a recorded hand-over takes its place too
    assert cancellation.outcomes(stepped) == [*_slow_outcomes(stepped), 7.5]


def test_fresh_states_own_their_containers() -> None:
    """The builtin factories give every state empty containers of its own."""
    one, two = ExecutionState(), ExecutionState()
    for f in dataclasses.fields(ExecutionState):
        if f.default_factory is dataclasses.MISSING or f.name == "meter":
            continue
        a, b = getattr(one, f.name), getattr(two, f.name)
        assert type(a) in (dict, list) and not a and a is not b, f.name
    one.gates["s"] = {"on": "x", "correlation_key": "k", "wake_at": None}
    one.capabilities.append("c")
    assert not two.gates and not two.capabilities


async def test_a_session_without_a_cancel_keeps_no_cancel_bookkeeping() -> None:
    """The delivery record is made for a session only when a cancel concerns it (the
    sessions a cancel reaches are pinned by the cancellation suite)."""
    _seen.clear()
    _release[:] = [asyncio.Event(), asyncio.Event()]
    rt = Runtime(app, InMemoryEventStore())
    gc.collect()  # (sessions of earlier tests)
    before = len(cancellation._SESSIONS)  # pyright: ignore[reportPrivateUsage]
    running = asyncio.ensure_future(rt.start("held", 1, execution_id="h"))
    await _release[0].wait()
    assert _seen == [before]
    _release[1].set()
    assert (await running).status == "completed"


async def test_report_keeps_outputs_stored_as_they_are_and_decodes_escaped_ones() -> None:
    rt = Runtime(app, InMemoryEventStore())
    plain = await rt.start("echo", {"a": [1, 2]}, execution_id="plain")
    assert plain.output == {"a": [1, 2]}
    escaped = await rt.start("echo", {ESCAPE_KEY: 1}, execution_id="escaped")
    assert escaped.output == {ESCAPE_KEY: 1}  # stored escaped, read back as returned
    state = await rt.load_state("escaped")
    assert state.output == {ESCAPE_KEY: {ESCAPE_KEY: 1}}
    again = await rt.report(state)
    assert again.output == {ESCAPE_KEY: 1}
    assert again.model_fields_set == plain.model_fields_set


_lingering: list[asyncio.Task[None]] = []


@app.flow("stubborn")
async def stubborn(ctx: FlowContext, n: int) -> int:
    async def linger() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(1.5)  # outlives the session's reaping (1 s)

    _lingering.append(asyncio.ensure_future(linger()))
    await asyncio.sleep(0)
    return await ctx.execute(double, n)


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """Record each ``let_go``: whether it freed the session, and whether it is empty."""
    seen: list[tuple[bool, bool]] = []
    real = starts.let_go

    def let_go(session: Session) -> bool:
        freed = real(session)
        seen.append((freed, not session.__dict__))
        return freed

    monkeypatch.setattr(starts, "let_go", let_go)
    return seen


async def test_an_ended_session_is_let_go_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs whose sessions are emptied at the end write and report what runs whose
    sessions are left to the garbage collector do."""

    async def run(free: bool) -> list[Any]:
        rt = Runtime(app, InMemoryEventStore())
        if not free:
            monkeypatch.setattr(starts, "let_go", _keep)
        results = [
            await rt.start("steps", 0, execution_id="a"),
            await rt.start("steps", 3, execution_id="b"),
            await rt.resume("b", "go", "k", None),
            await rt.start("echo", {"x": 1}, execution_id="c"),
        ]
        histories = [await rt.history(eid) for eid in ("a", "b", "c")]
        monkeypatch.undo()
        return [
            [_timeless(r.model_dump()) for r in results],
            [[_timeless(e.model_dump()) for e in h] for h in histories],
        ]

    seen = _recording(monkeypatch)
    freed = await run(True)
    assert seen and all(s == (True, True) for s in seen)
    assert freed == await run(False)


def _keep(session: Session) -> bool:
    """``let_go`` that frees nothing: the garbage collector's way."""
    return False


def _timeless(value: Any) -> Any:
    """``value`` without what the clock and the holder's id decide."""
    drop = {"at", "started_at", "updated_at", "until", "holder", "duration_s", "effect_seconds"}
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in drop}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [_timeless(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


async def test_a_session_a_task_outlives_is_kept_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recording(monkeypatch)
    rt = Runtime(app, InMemoryEventStore())
    result = await rt.start("stubborn", 2, execution_id="s")
    assert result.status == "completed" and result.output == 4
    assert seen == [(False, False)]


def test_a_holder_names_this_process_and_a_forked_child_its_own() -> None:
    """The holder's ``machine:pid:`` is taken once per process, and again after a fork."""
    mine = claims.new_holder()
    assert mine.rsplit(":", 1)[0] == f"{claims.HOST}:{os.getpid()}"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its holder and leave at once
        os.write(write, claims.new_holder().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    theirs = os.read(read, 1000).decode()
    os.close(read)
    assert theirs.rsplit(":", 1)[0] == f"{claims.HOST}:{pid}"
    assert claims.new_holder().rsplit(":", 1)[0] == f"{claims.HOST}:{os.getpid()}"


def _validated(cls: type[Any], fields: dict[str, Any]) -> Any:
    """``known_valid`` the long way: pydantic validates the fields."""
    return cls(**fields)


def _same_model(fast: BaseModel, slow: BaseModel) -> None:
    assert type(fast) is type(slow)
    assert fast.__dict__ == slow.__dict__ and list(fast.__dict__) == list(slow.__dict__)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.model_dump_json() == slow.model_dump_json() and repr(fast) == repr(slow)
    assert fast == slow


async def test_results_and_packages_built_unvalidated_are_what_validation_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt = Runtime(app, InMemoryEventStore())
    await rt.start("steps", 3, execution_id="waits")  # suspended at its gate
    await rt.start("echo", {"x": [1]}, execution_id="done")
    await rt.start("steps", 0, execution_id="failed")
    failed = await rt.load_state("failed")
    failed.status, failed.error = "failed", {"code": "boom", "message": "m"}
    states = [fold([]), await rt.load_state("waits"), await rt.load_state("done"), failed]
    for state in states:
        for include in (True, False):
            fast = ExecutionResult.from_state(state, include_state=include)
            with monkeypatch.context() as m:
                m.setattr(wire, "known_valid", _validated)
                slow = ExecutionResult.from_state(state, include_state=include)
            if include:
                assert fast.state == slow.state
            _same_model(fast, slow)
            assert fast.error is None or fast.error is not state.error  # a copy, as validated
    fields: dict[str, Any] = {
        "execution_id": "e",
        "flow": "f",
        "reason": "start",
        "dispatch_id": "e:1",
    }
    package = wire.known_valid(ExecutionPackage, dict(fields))
    _same_model(package, ExecutionPackage(**fields))
    assert hash(package) == hash(ExecutionPackage(**fields))
    with pytest.raises(ValidationError):
        package.flow = "g"  # (frozen all the same)


async def test_the_claim_and_the_end_built_unvalidated_are_what_validation_builds() -> None:
    """A start's first claim and a flow's completion skip validation; they are the events
    validation builds, floats included (an int clock's times are written as floats)."""
    for now, until in ((1_000, 1_030), (1_000.25, 1_030.5)):
        fast = starts.first_claim("h:1", now, until)
        _same_model(fast, ev.ExecutionClaimed(holder="h:1", until=until, seq=2, at=now))
        assert ev.event_to_json(fast) == ev.event_to_json(
            ev.ExecutionClaimed(holder="h:1", until=until, seq=2, at=now)
        )
    codec = PayloadCodec()
    for output in (None, 3, "s", [1, {"a": 2.5}], {ESCAPE_KEY: 1}, {"$blob": "x"}):
        end = await completion_event(codec, output, "e1")
        stored, _ = await codec.encode(output, "e1/output")
        _same_model(end, ev.ExecutionCompleted(output=stored))
    failed = await completion_event(codec, float("nan"), "e1")
    assert failed.type == "ExecutionFailed"  # not exact JSON: never stored changed


class _Name(str):
    """A str subclass: validation makes a plain str of it."""


_START_BASE: dict[str, Any] = {
    "execution_id": "e1",
    "flow": "steps",
    "input": {"a": [1, 2.5, None]},
    "flow_version": "2",
    "capabilities": [],
    "budgets": {},
    "at": 1_000.5,
    "by": None,
    "deadline": None,
}


@pytest.mark.parametrize(
    ("changes", "fast"),
    [
        ({}, True),
        ({"capabilities": ["a", "b"], "by": "ops", "deadline": 1_060.5}, True),
        ({"queue": "q", "partition_key": None}, True),
        ({"queue": "q", "partition_key": "p"}, True),
        ({"input": None}, True),
        ({"step_numbering": 2}, True),
        ({"step_numbering": True}, False),  # (a bool: what validation makes of it)
        ({"at": 1_000}, False),  # an int clock: validation makes floats of it
        ({"deadline": 1_060}, False),
        ({"budgets": {"usd": 1}}, False),
        ({"budgets": {"usd": 1.5}}, False),
        ({"flow": _Name("steps")}, False),
        ({"execution_id": _Name("e1")}, False),
        ({"by": _Name("ops")}, False),
        ({"capabilities": [_Name("a")]}, False),
        ({"queue": _Name("q"), "partition_key": None}, False),
        ({"queue": "q", "partition_key": _Name("p")}, False),
    ],
)
def test_a_start_built_unvalidated_is_what_validation_builds(
    changes: dict[str, Any], fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start's first event skips validation when its values are of the types validation
    gives (and takes the validated way when not): the same event either way."""
    fields = {**_START_BASE, **changes}
    built: list[type[Any]] = []
    real = ev.unvalidated

    def counted(cls: type[Any], values: dict[str, Any], given: set[str]) -> Any:
        built.append(cls)
        return real(cls, values, given)

    monkeypatch.setattr(ev, "unvalidated", counted)
    got = starts.started_event(dict(fields))
    monkeypatch.undo()
    assert built == ([ev.ExecutionStarted] if fast else [])
    want = ev.ExecutionStarted(**fields)
    _same_model(got, want)
    assert ev.event_to_json(got) == ev.event_to_json(want)
    for name in ("flow", "execution_id", "by", "queue"):
        assert type(getattr(got, name)) in (str, type(None))


async def test_a_start_writes_the_event_validation_builds() -> None:
    """Through ``Runtime.start``: the stored first event of a plain start, and of one with
    capabilities and a timeout, is the validated event of the same values."""
    rt = Runtime(app, InMemoryEventStore(), clock=lambda: 1_000.25)
    await rt.start("echo", {"v": [1, "x"]}, execution_id="plain")
    await rt.start("echo", 3, execution_id="caps", capabilities=["b", "a"], timeout=30)
    for eid in ("plain", "caps"):
        first = (await rt.history(eid))[0]
        assert isinstance(first, ev.ExecutionStarted)
        fields = {name: getattr(first, name) for name in first.model_fields_set}
        want = ev.ExecutionStarted(**fields).model_copy(update={"seq": 1})
        assert ev.event_to_json(first) == ev.event_to_json(want)
    caps = (await rt.history("caps"))[0]
    assert isinstance(caps, ev.ExecutionStarted)
    assert caps.capabilities == ["a", "b"] and caps.deadline == 1_030.25


async def test_an_end_recorded_without_a_coroutine_is_the_end_the_coroutine_records() -> None:
    """``completion_inline`` gives ``completion_event``'s event for every output stored
    inline or refused, and leaves an output for the blob store to it (``None``)."""
    codec = PayloadCodec(threshold=64)
    outputs: list[Any] = [None, 3, "s", [1, {"a": 2.5}], {ESCAPE_KEY: 1}, {"$blob": "x"}]
    outputs += [float("nan"), {"deep": [[[1]]]}, b"\xff", _Name("n")]
    for output in outputs:
        fast = completion_inline(codec, output)
        slow = await completion_event(codec, output, "e1")
        assert fast is not None
        _same_model(fast, slow)
        assert ev.event_to_json(fast) == ev.event_to_json(slow)
    assert completion_inline(codec, "x" * 100) is None  # over the threshold: a blob


async def test_a_settled_report_shows_what_a_report_taken_at_once_shows() -> None:
    """A result of a state its caller drops (``settled``) builds ``state`` when read; it
    shows what a result that copied the small fields at once shows."""
    rt = Runtime(app, InMemoryEventStore())
    await rt.start("steps", 3, execution_id="waits")
    await rt.start("echo", {"x": [1]}, execution_id="done")
    for eid in ("waits", "done"):
        state = await rt.load_state(eid)
        settled = await rt.report(state, settled=True)
        at_once = await rt.report(state)
        assert settled.state == at_once.state and settled.state["execution_id"] == eid
        _same_model(settled, at_once)
        assert settled.model_dump_json() == at_once.model_dump_json()
    state = await rt.load_state("done")
    copied = await rt.report(state)
    state.status = "changed"  # a state changed after a report taken at once: not shown
    assert copied.state["status"] == "completed"


async def test_a_start_run_here_reports_its_state() -> None:
    """A start run here reports its settled state: what reading it back reports."""
    rt = Runtime(app, InMemoryEventStore())
    started = await rt.start("echo", {"v": 1}, execution_id="r")
    again = await rt.result("r")
    assert started.state == again.state and started.state["status"] == "completed"
    assert started.model_dump(exclude={"state"}) == again.model_dump(exclude={"state"})
