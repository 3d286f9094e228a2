"""Temporal's update and query scenarios (the features suite's ``update/*`` and the Python
SDK's handler tests), ported to Loom's ``ctx.set_update_handler`` /
``ctx.set_query_handler``.

Temporal's handlers are methods of a workflow object; a Loom flow is a function, so its state
lives in locals and the handlers are closures over them. Where a Temporal workflow waits with
``workflow.wait_condition(lambda: self.done)``, the Loom flow waits on an ``asyncio.Event``
its handler sets. Temporal fails a workflow *task* (and retries it) on a non-application
error in an update handler; Loom fails the update itself, whatever the exception, and the
flow goes on. Every test runs on SQLite on disk, and every execute call is checked by a
replay of the whole log.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import (
    UnknownQueryError,
    UpdateFailedError,
    UpdateRejectedError,
    UpdateTimeoutError,
)
from loom.runtime import Runtime
from loom.wire import ExecutionPackage
from tests.peers.temporal.harness import EnvFactory

RUNTIMES: dict[str, Runtime] = {}
RELEASE: dict[str, asyncio.Event] = {}
VALIDATED: list[str] = []


def updates_app() -> Loom:
    app = Loom("temporal-updates")

    @app.effect("say_hi")
    async def say_hi(ctx: EffectContext, _: None) -> str:
        return "hi"

    @app.effect("blocks")
    async def blocks(ctx: EffectContext, _: None) -> str:
        await RELEASE["blocks"].wait()
        return "hi"

    @app.effect("self_update")
    async def self_update(ctx: EffectContext, _: None) -> Any:
        return await RUNTIMES["rt"].update(ctx.execution_id, "update_me", timeout=20)

    @app.flow("basic")
    async def basic(ctx: FlowContext, _: None) -> str:
        state = {"value": ""}
        changed = asyncio.Event()

        async def my_update(arg: str) -> str:
            state["value"] = arg
            changed.set()
            return "update-result"

        def my_validator(arg: str) -> None:
            if arg == "reject-me":
                raise ValueError("Rejected")

        ctx.set_update_handler("my_update", my_update, validator=my_validator)
        await changed.wait()
        return state["value"]

    @app.flow("counter")
    async def counter(ctx: FlowContext, _: None) -> int:
        total = {"n": 0}
        five = asyncio.Event()

        async def do_update(arg: int) -> int:
            total["n"] += arg
            if total["n"] == 5:
                five.set()
            return total["n"]

        def reject_negatives(arg: int) -> None:
            VALIDATED.append(f"do_update {arg}")
            if arg < 0:
                raise ValueError("I *HATE* negative numbers!")

        ctx.set_update_handler("do_update", do_update, validator=reject_negatives)
        await five.wait()
        return total["n"]

    @app.flow("dedup")
    async def dedup(ctx: FlowContext, _: None) -> str:
        state = {"counter": 0}
        two = asyncio.Event()

        async def inc_counter() -> int:
            state["counter"] += 1
            if state["counter"] == 2:
                two.set()
            await ctx.recv("unblock")  # Temporal's wait for the proceed signal
            return state["counter"]

        ctx.set_update_handler("inc_counter", inc_counter)
        await two.wait()
        return "Hello, World!"

    @app.flow("maybe_wait")
    async def maybe_wait(ctx: FlowContext, _: None) -> str:
        done = asyncio.Event()

        async def do_maybe_wait_update(sleep: bool) -> int:
            if not sleep:
                raise ValueError("Dying on purpose")
            await ctx.recv("unblock")
            return 123

        ctx.set_update_handler("do_maybe_wait_update", do_maybe_wait_update)
        ctx.set_update_handler("finish", lambda: done.set())
        await done.wait()
        return "Hello, World!"

    @app.flow("activities")
    async def activities(ctx: FlowContext, _: None) -> str:
        done = asyncio.Event()

        async def do_activities() -> list[str]:
            results = await asyncio.gather(*(ctx.execute(say_hi) for _ in range(6)))
            done.set()
            return list(results)

        ctx.set_update_handler("do_activities", do_activities)
        await done.wait()
        return "Hello, World!"

    @app.flow("restart")
    async def restart(ctx: FlowContext, _: None) -> str:
        done = asyncio.Event()

        async def do_activities() -> str:
            got = await ctx.execute(blocks)
            done.set()
            return got

        ctx.set_update_handler("do_activities", do_activities)
        await done.wait()
        return "Hello, World!"

    @app.flow("self")
    async def self_flow(ctx: FlowContext, _: None) -> str:
        done = asyncio.Event()

        def update_me() -> str:
            done.set()
            return "updated"

        ctx.set_update_handler("update_me", update_me)
        await ctx.execute(self_update)
        await done.wait()
        return "Hello, World!"

    @app.flow("handlers")
    async def handlers(ctx: FlowContext, _: None) -> None:
        last: dict[str, str | None] = {"event": None}

        def last_event(an_arg: str) -> str:
            if an_arg == "fail":
                raise ValueError("SyncFail")
            previous = last["event"] or "<no event>"
            last["event"] = an_arg
            return previous

        def last_event_validator(an_arg: str) -> None:
            if an_arg == "reject_me":
                raise ValueError("Rejected")

        async def last_event_async(an_arg: str) -> str:
            await ctx.execute(say_hi)
            if an_arg == "fail":
                raise ValueError("AsyncFail")
            previous = last["event"] or "<no event>"
            last["event"] = an_arg
            return previous

        def set_dynamic() -> str:
            def dynahandler(name: str, _args: Any) -> str:
                return "dynahandler - " + name

            def dynavalidator(name: str, _args: Any) -> None:
                if name == "reject_me":
                    raise ValueError("Rejected")

            ctx.set_dynamic_update_handler(dynahandler, validator=dynavalidator)
            return "set"

        ctx.set_update_handler("first_task_update", lambda: "worked")
        ctx.set_update_handler("last_event", last_event, validator=last_event_validator)
        ctx.set_update_handler("last_event_async", last_event_async)
        ctx.set_update_handler("renamed", lambda: "named")
        ctx.set_update_handler("set_dynamic", set_dynamic)
        await asyncio.get_running_loop().create_future()  # wait forever

    @app.flow("separate")
    async def separate(ctx: FlowContext, _: None) -> str:
        complete = asyncio.Event()

        async def update() -> str:
            await ctx.recv("signal")
            complete.set()
            return "update-done"

        ctx.set_update_handler("update", update)
        await complete.wait()
        return "workflow-done"

    @app.flow("queries")
    async def queries(ctx: FlowContext, _: None) -> None:
        last: dict[str, str | None] = {"event": None}
        ctx.set_query_handler("last_event", lambda: last["event"] or "<no event>")

        def set_query_handler(query_name: str) -> None:
            def new_handler(arg: str) -> str:
                return f"query {query_name}: {arg}"

            ctx.set_query_handler(query_name, new_handler)

        def set_dynamic_query_handler() -> None:
            def new_handler(name: str, arg: Any) -> str:
                return f"query dynamic {name}: {arg}"

            ctx.set_dynamic_query_handler(new_handler)

        def note(arg: str) -> None:
            last["event"] = f"update: {arg}"

        ctx.set_update_handler("set_query_handler", set_query_handler)
        ctx.set_update_handler("set_dynamic_query_handler", set_dynamic_query_handler)
        ctx.set_update_handler("note", note)
        await asyncio.get_running_loop().create_future()

    return app


async def test_update_basic_and_a_validator_that_rejects(make_env: EnvFactory) -> None:
    env = make_env(updates_app())
    await env.start("basic", execution_id="basic")
    with pytest.raises(UpdateRejectedError, match="Rejected"):
        await env.runtime.update("basic", "my_update", "reject-me")
    assert await env.runtime.update("basic", "my_update", "update-arg") == "update-result"
    assert (await env.runtime.result("basic")).output == "update-arg"


async def test_update_non_durable_reject(make_env: EnvFactory) -> None:
    """features/update/non_durable_reject: rejections leave nothing in the history."""
    env = make_env(updates_app())
    await env.start("counter", execution_id="c")
    for _ in range(5):
        with pytest.raises(UpdateRejectedError, match="negative numbers"):
            await env.runtime.update("c", "do_update", -1)
        await env.runtime.update("c", "do_update", 1)
    assert (await env.runtime.result("c")).output == 5
    kinds = await env.types("c")
    assert kinds.count("UpdateAccepted") == 5 and kinds.count("UpdateCompleted") == 5


async def test_update_validation_runs_once_per_update_not_on_replay(
    make_env: EnvFactory,
) -> None:
    """features/update/validation_replay: an accepted update's validator never runs again,
    however often the flow is replayed (every execute call here is followed by a replay)."""
    VALIDATED.clear()
    env = make_env(updates_app())
    await env.start("counter", execution_id="v")
    for _ in range(5):
        await env.runtime.update("v", "do_update", 1)
    assert VALIDATED == ["do_update 1"] * 5


async def test_update_deduplication(make_env: EnvFactory) -> None:
    """features/update/deduplication: two starts with one id while its handler waits are
    one update; both get its answer."""
    env = make_env(updates_app())
    await env.start("dedup", execution_id="d")
    h1 = await env.runtime.start_update("d", "inc_counter", update_id="incrementer")
    h2 = await env.runtime.start_update("d", "inc_counter", update_id="incrementer")
    assert h1.status == h2.status == "accepted"
    await env.runtime.send("d", "unblock")
    results = await asyncio.gather(
        env.runtime.update_result("d", "incrementer", timeout=20),
        env.runtime.update_result("d", "incrementer", timeout=20),
    )
    assert results == [1, 1]
    await env.runtime.start_update("d", "inc_counter")  # only unblocks the flow
    assert (await env.runtime.result("d")).output == "Hello, World!"
    history = await env.history("d")
    assert sum(1 for e in history if e.type == "UpdateAccepted") == 2
    completed = [e for e in history if e.type == "UpdateCompleted"]
    assert [e.update_id for e in completed] == ["incrementer"]  # type: ignore[union-attr]


async def test_update_async_accepted(make_env: EnvFactory) -> None:
    """features/update/async_accepted: accepted, then answered once unblocked; a failing
    one fails; waiting for one that is not answered times out."""
    env = make_env(updates_app())
    await env.start("maybe_wait", execution_id="a")
    got = await env.runtime.start_update("a", "do_maybe_wait_update", True, update_id="sleepy")
    assert got.status == "accepted"
    await env.runtime.send("a", "unblock")
    assert await env.runtime.update_result("a", "sleepy", timeout=20) == 123
    await env.runtime.start_update("a", "do_maybe_wait_update", False, update_id="failing")
    with pytest.raises(UpdateFailedError, match="Dying on purpose") as failed:
        await env.runtime.update_result("a", "failing", timeout=20)
    assert failed.value.error["type"] == "ValueError"
    await env.runtime.start_update("a", "do_maybe_wait_update", True, update_id="timeout")
    with pytest.raises(UpdateTimeoutError):
        await env.runtime.update_result("a", "timeout", timeout=1)
    await env.runtime.update("a", "finish")
    assert (await env.runtime.result("a")).output == "Hello, World!"


async def test_update_activities(make_env: EnvFactory) -> None:
    """features/update/activities: a handler that runs six activities at once."""
    env = make_env(updates_app())
    await env.start("activities", execution_id="act")
    assert await env.runtime.update("act", "do_activities") == ["hi"] * 6
    assert (await env.runtime.result("act")).output == "Hello, World!"


async def test_update_self(make_env: EnvFactory) -> None:
    """features/update/self: an activity updates its own workflow."""
    env = make_env(updates_app())
    RUNTIMES["rt"] = env.runtime
    done = await asyncio.wait_for(env.start("self", execution_id="me"), 30)
    assert (done.status, done.output) == ("completed", "Hello, World!")


async def test_update_worker_restart(make_env: EnvFactory) -> None:
    """features/update/worker_restart: the worker stops while the handler's activity runs;
    a new worker runs the handler again and the update is answered."""
    RELEASE["blocks"] = asyncio.Event()
    env = make_env(updates_app(), claim_ttl=1.0)
    await env.start("restart", execution_id="r")
    # Accepting the update runs the flow inline: this task is the worker.
    worker = asyncio.ensure_future(env.runtime.start_update("r", "do_activities", update_id="u"))
    await asyncio.sleep(0.5)  # the handler's activity is running
    worker.cancel()  # the worker stops mid-step: nothing more of that call is recorded
    with pytest.raises(asyncio.CancelledError):
        await worker
    assert "UpdateCompleted" not in await env.types("r")
    RELEASE["blocks"].set()
    env.clock.now += 5  # its claim lapses
    await env.runtime.execute(ExecutionPackage(execution_id="r"))  # a restarted worker
    assert await env.runtime.update_result("r", "u", timeout=20) == "hi"
    assert (await env.runtime.result("r")).output == "Hello, World!"
    assert (await env.types("r")).count("UpdateCompleted") == 1


async def test_update_handlers_happy(make_env: EnvFactory) -> None:
    env = make_env(updates_app())
    await env.start("handlers", execution_id="h")
    assert await env.runtime.update("h", "first_task_update") == "worked"
    assert await env.runtime.update("h", "last_event", "val2") == "<no event>"
    assert await env.runtime.update("h", "last_event_async", "val3") == "val2"
    assert await env.runtime.update("h", "set_dynamic") == "set"
    assert await env.runtime.update("h", "made_up") == "dynahandler - made_up"
    assert await env.runtime.update("h", "renamed") == "named"
    assert await env.runtime.update("h", "last_event", "val4") == "val3"


async def test_update_handlers_unhappy(make_env: EnvFactory) -> None:
    env = make_env(updates_app())
    await env.start("handlers", execution_id="u")
    with pytest.raises(UpdateRejectedError, match="whargarbl"):
        await env.runtime.update("u", "whargarbl", "whatever")
    with pytest.raises(UpdateRejectedError, match="Rejected"):
        await env.runtime.update("u", "last_event", "reject_me")
    with pytest.raises(UpdateFailedError, match="SyncFail"):
        await env.runtime.update("u", "last_event", "fail")
    with pytest.raises(UpdateFailedError, match="AsyncFail"):
        await env.runtime.update("u", "last_event_async", "fail")
    await env.runtime.update("u", "set_dynamic")
    with pytest.raises(UpdateRejectedError, match="Rejected"):
        await env.runtime.update("u", "reject_me")


async def test_update_separate_handle(make_env: EnvFactory) -> None:
    env = make_env(updates_app())
    await env.start("separate", execution_id="s")
    first = await env.runtime.start_update("s", "update")
    task1 = asyncio.ensure_future(env.runtime.update_result("s", first.update_id, timeout=20))
    task2 = asyncio.ensure_future(env.runtime.update_result("s", first.update_id, timeout=20))
    await env.runtime.send("s", "signal")
    assert await task1 == "update-done" and await task2 == "update-done"
    assert (await env.runtime.result("s")).output == "workflow-done"


async def test_query_handlers_set_at_run_time_and_dynamic(make_env: EnvFactory) -> None:
    """The SDK's signal and query handlers test: a query registered by the flow as it runs
    (here by an update, where Temporal uses a signal), and a dynamic one."""
    env = make_env(updates_app())
    await env.start("queries", execution_id="q")
    assert await env.runtime.query("q", "last_event") == "<no event>"
    await env.runtime.update("q", "note", "val1")
    assert await env.runtime.query("q", "last_event") == "update: val1"
    with pytest.raises(UnknownQueryError):
        await env.runtime.query("q", "unknown_query1", "val2")
    await env.runtime.update("q", "set_query_handler", "unknown_query1")
    assert await env.runtime.query("q", "unknown_query1", "val2") == "query unknown_query1: val2"
    await env.runtime.update("q", "set_dynamic_query_handler")
    assert await env.runtime.query("q", "made_up", "val3") == "query dynamic made_up: val3"
    before = await env.types("q")
    await env.runtime.query("q", "last_event")
    assert await env.types("q") == before  # a query writes nothing
