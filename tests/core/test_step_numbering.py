"""Step ids of new executions are the same on every Python; older executions keep theirs.

``asyncio.wait_for(ctx.execute(...), t)`` runs the awaited coroutine in a task of its own on
Python 3.11 and in the caller's task from 3.12 on (3.12 still makes a task when
``timeout <= 0``). A new execution records ``step_numbering`` on its ``ExecutionStarted``
and numbers the coroutine ``wait_for`` wraps in its caller's scope on every version; one
recorded without it numbers by the task tree of the Python it runs on, as it did.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loom.events import (
    EVENTS_ADAPTER,
    ChildStarted,
    DecisionRecorded,
    EffectCompleted,
    Event,
    ExecutionStarted,
    event_to_dict,
)
from loom.kernel.context import STEP_NUMBERING
from loom.kernel.task_factories import install_task_factory
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.testing import replay
from loom.wire import ExecutionPackage
from tests.core import step_numbering_app as numbering
from tests.core.step_numbering_app import CALLS, app

ROOT = Path(__file__).resolve().parents[2]
PY311 = sys.version_info < (3, 12)
OUTPUT = {"fast": "fast", "slow": "timed out", "zero": "timed out", "pair": ["a", "b"]}
NEW_STEPS = ["1", "2.1", "3.1", "4", "5"]  # the zero-timeout wait_for takes no id
# Recorded without a numbering: 3.11 gives each wait_for a task (a prefix); 3.12 the
# zero-timeout one alone, so the ids after it shift by one there too.
OLD_STEPS = ["1.1", "3.1", "4.1", "5", "6.1"] if PY311 else ["1", "3.1", "4.1", "5", "6"]


def steps(history: list[Event]) -> list[str]:
    return [e.step_id for e in history if isinstance(e, EffectCompleted)]


def timers(history: list[Event]) -> list[str]:
    return [e.step_id for e in history if isinstance(e, DecisionRecorded) and e.kind == "timer"]


async def start_unnumbered(rt: Runtime, flow: str, value: Any, eid: str) -> None:
    """Create an execution as Loom wrote them before the numbering was recorded, and run it."""
    CALLS.clear()
    await rt.store.create(ExecutionStarted(execution_id=eid, flow=flow, input=value, at=1.0))
    await rt.execute(ExecutionPackage(execution_id=eid, reason="start"))


async def test_a_new_execution_records_its_numbering_and_numbers_wait_for_in_the_caller():
    CALLS.clear()
    rt = Runtime(app, InMemoryEventStore())
    done = await rt.start("deadlines", None, execution_id="d")
    assert (done.status, done.output) == ("completed", {**OUTPUT, "last": "last"})
    history = await rt.history("d")
    assert isinstance(history[0], ExecutionStarted)
    assert history[0].step_numbering == STEP_NUMBERING
    assert sorted(steps(history)) == sorted(NEW_STEPS)
    assert timers(history) == ["t1", "t2"]  # both wait_for deadlines, in the flow's scope
    assert [f"d:{s}" for s in NEW_STEPS] == CALLS
    outcome = await replay(app, history)
    assert (outcome.status, outcome.output) == ("completed", done.output)
    assert len(CALLS) == len(NEW_STEPS)  # the replay invoked nothing


async def test_an_execution_recorded_without_a_numbering_keeps_the_task_tree():
    rt = Runtime(app, InMemoryEventStore())
    await start_unnumbered(rt, "deadlines", None, "old")
    history = await rt.history("old")
    assert history[-1].type == "ExecutionCompleted"
    assert [f"old:{s}" for s in OLD_STEPS] == CALLS
    outcome = await replay(app, history)
    assert outcome.status == "completed"
    assert len(CALLS) == len(OLD_STEPS)


async def test_tasks_created_under_wait_for_take_scopes_of_their_own():
    """Only the task ``wait_for`` itself creates shares its caller's scope; the tasks its
    awaitable creates are numbered as anywhere else (from 3.12 that awaitable runs in the
    caller's task, with ``wait_for`` further up the stack)."""
    CALLS.clear()
    done = await Runtime(app, InMemoryEventStore()).start("nested", None, execution_id="n")
    assert (done.status, done.output) == ("completed", ["a", "b", "c", "d"])
    assert [f"n:{s}" for s in ("1.1", "2.1", "3.1", "4")] == CALLS


@pytest.mark.parametrize("wraps_loom", [False, True])
async def test_a_wait_for_task_under_a_foreign_task_factory_shares_the_callers_scope(
    wraps_loom: bool,
):
    """Another library's factory on the loop, installed before Loom's or wrapping it: the
    step under ``wait_for`` is numbered as with Loom's alone."""
    loop = asyncio.get_running_loop()
    before = loop.get_task_factory()
    if wraps_loom:
        install_task_factory(loop)
    found = loop.get_task_factory()
    built: list[object] = []

    def theirs(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Future[Any]:
        built.append(coro)
        if found is not None:
            return found(loop, coro, **options)
        return asyncio.Task(coro, loop=loop, **options)

    loop.set_task_factory(theirs)
    try:
        CALLS.clear()
        done = await Runtime(app, InMemoryEventStore()).start("deadlines", None, execution_id="f")
        assert (loop.get_task_factory() is theirs) == wraps_loom  # composed only if needed
    finally:
        loop.set_task_factory(before)
    assert done.status == "completed" and built
    assert [f"f:{s}" for s in NEW_STEPS] == CALLS


@pytest.mark.parametrize("numbered", [True, False])
async def test_a_child_is_numbered_as_its_parent(numbered: bool):
    rt = Runtime(app, InMemoryEventStore())
    if numbered:
        CALLS.clear()
        await rt.start("parent", None, execution_id="p")
    else:
        await start_unnumbered(rt, "parent", None, "p")
    history = await rt.history("p")
    assert history[-1].type == "ExecutionCompleted"
    [child] = [e.child_id for e in history if isinstance(e, ChildStarted)]
    kid = await rt.history(child)
    assert isinstance(kid[0], ExecutionStarted)
    assert kid[0].step_numbering == (STEP_NUMBERING if numbered else None)
    assert sorted(steps(kid)) == sorted(NEW_STEPS if numbered else OLD_STEPS)


async def test_the_next_run_after_continue_as_new_keeps_the_numbering():
    rt = Runtime(app, InMemoryEventStore())
    await start_unnumbered(rt, "twice", 1, "old")
    old = list(CALLS)
    CALLS.clear()
    await rt.start("twice", 1, execution_id="new")
    first = "1.1" if PY311 else "1"
    assert old == [f"old:{first}", f"old#run2:{first}"]
    assert CALLS == ["new:1", "new#run2:1"]
    assert (await rt.result("old")).output == (await rt.result("new")).output == "round 2"


async def test_a_fork_keeps_its_origins_numbering():
    """The fork copies the origin's steps before its cut: numbered the origin's way."""
    rt = Runtime(app, InMemoryEventStore())
    await start_unnumbered(rt, "deadlines", None, "old")
    cut = OLD_STEPS[2]  # the second gathered step: the ones before it are reused
    CALLS.clear()
    forked = await rt.fork("old", cut, new_id="fork")
    assert forked.status == "completed" and forked.output == (await rt.result("old")).output
    started = (await rt.history("fork"))[0]
    assert isinstance(started, ExecutionStarted) and started.step_numbering is None
    assert [f"fork:{s}" for s in OLD_STEPS[2:]] == CALLS  # the copied prefix ran no effect


async def test_a_fork_cut_before_a_cut_short_step_landed_runs_it_again():
    """The step ``wait_for`` cut short landed after the steps that followed it; a fork cut
    between them holds those steps but not it. Its replay asks for it first: no divergence,
    on any Python (on 3.11 it runs in a task of its own; from 3.12 on in the flow's)."""
    CALLS.clear()
    rt = Runtime(app, InMemoryEventStore())
    done = await rt.start("cut", None, execution_id="c")
    assert done.output == ["timed out", "a", "b"]
    assert [e.step_id for e in await rt.history("c") if isinstance(e, EffectCompleted)] == [
        "2",
        "3",
        "1",
    ]
    CALLS.clear()
    forked = await rt.fork("c", "3", new_id="cf")
    assert (forked.status, forked.output, forked.parked_reason) == ("completed", done.output, None)
    assert CALLS == ["cf:1", "cf:3"]  # step 2 served from the copy


# -- across Python versions ------------------------------------------------------------------


def other_python() -> str | None:
    """An interpreter of another Python version that can import Loom's dependencies:
    ``LOOM_OTHER_PYTHON``, else ``python3.12`` (on 3.11) or ``python3.11`` (on 3.12 on)."""
    named = os.environ.get("LOOM_OTHER_PYTHON") or shutil.which(
        "python3.12" if PY311 else "python3.11"
    )
    if not named:
        return None
    probe = subprocess.run(
        [named, "-c", "import sys, pydantic; print(sys.version_info[:2] >= (3, 12))"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    if probe.returncode != 0 or probe.stdout.strip() != str(PY311):
        return None  # not runnable here, no dependencies, or the same side of 3.12
    return named


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "functions"), str(ROOT)])  # this checkout's Loom first
    return {**os.environ, "PYTHONPATH": path}


def run_other(python: str, *args: str) -> Any:
    done = subprocess.run(
        [python, "-m", "tests.core.step_numbering_app", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert tuple(answer["python"]) != sys.version_info[:2]
    assert Path(answer["loom"]).resolve().is_relative_to(ROOT)  # this checkout's Loom
    return answer["r"]


@pytest.fixture
def other() -> str:
    python = other_python()
    if python is None:
        pytest.skip(
            "no interpreter on the other side of Python 3.12 with Loom's dependencies: set "
            "LOOM_OTHER_PYTHON to one (3.12+ when running on 3.11, 3.11 when on 3.12+)"
        )
    return python


async def test_a_history_recorded_here_replays_on_the_other_python(other: str, tmp_path: Path):
    history = await numbering.record()
    assert sorted(steps(EVENTS_ADAPTER.validate_python(history))) == sorted(NEW_STEPS)
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history))
    got = await asyncio.to_thread(run_other, other, "replay", str(path))
    assert got == {"status": "completed", "output": {**OUTPUT, "last": "last"}, "calls": []}


async def test_a_history_recorded_on_the_other_python_replays_here(other: str):
    recorded = await asyncio.to_thread(run_other, other, "record")
    history = EVENTS_ADAPTER.validate_python(recorded)
    assert isinstance(history[0], ExecutionStarted)
    assert history[0].step_numbering == STEP_NUMBERING
    assert sorted(steps(history)) == sorted(NEW_STEPS) and timers(history) == ["t1", "t2"]
    CALLS.clear()
    outcome = await replay(app, history)
    assert (outcome.status, outcome.output) == ("completed", {**OUTPUT, "last": "last"})
    assert CALLS == []
    assert [event_to_dict(e) for e in history] == recorded  # it loads as it was written
