"""``BackgroundLoop``: one loop per process that request threads run coroutines on."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from loom.workers.logs import bind, log_context
from loom.workers.loop import BackgroundLoop


def test_every_thread_runs_on_the_same_loop() -> None:
    runner = BackgroundLoop()

    async def which() -> asyncio.AbstractEventLoop:
        await asyncio.sleep(0)
        return asyncio.get_running_loop()

    with ThreadPoolExecutor(8) as pool:
        loops = set(pool.map(lambda _: runner.run(which()), range(32)))
    assert len(loops) == 1
    assert threading.current_thread() is threading.main_thread()


def test_exceptions_reach_the_caller() -> None:
    async def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        BackgroundLoop().run(boom())


def test_the_callers_log_context_is_seen_and_extended() -> None:
    from loom.workers import logs

    async def inside() -> object:
        bind(status="done")
        return dict(logs._context.get() or {})  # pyright: ignore[reportPrivateUsage]

    with log_context(execution_id="e1"):
        seen = BackgroundLoop().run(inside())
        after = dict(logs._context.get() or {})  # pyright: ignore[reportPrivateUsage]
    assert seen == {"execution_id": "e1", "status": "done"}
    assert after["status"] == "done"


def test_calling_it_from_its_own_loop_is_refused() -> None:
    runner = BackgroundLoop()

    async def nested() -> None:
        async def leaf() -> None:
            return None

        runner.run(leaf())

    with pytest.raises(RuntimeError, match="own loop"):
        runner.run(nested())
