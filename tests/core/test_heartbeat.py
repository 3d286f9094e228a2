"""The claim heartbeat: every session of one ``claim_ttl`` on a loop looks through one shared
timer, beats only while a beat is due, and stops on a failed beat or when its call ends."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.kernel.side_tasks import Heartbeat
from loom.runtime import Runtime
from loom.store import SqliteEventStore

PERIOD = 0.04


def _counting_call_later(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the delay of every timer armed through the running loop's ``call_later``."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    original: Callable[..., asyncio.TimerHandle] = loop.call_later

    def call_later(delay: float, callback: Callable[..., object], *args: Any, **kw: Any):
        armed.append(delay)
        return original(delay, callback, *args, **kw)

    monkeypatch.setattr(loop, "call_later", call_later)
    return armed


async def test_heartbeats_of_one_period_share_one_timer(monkeypatch: pytest.MonkeyPatch):
    """Twenty calls that end before the first look arm one timer between them, not one each."""
    armed = _counting_call_later(monkeypatch)
    period = 7.25  # a period no other heartbeat of this loop has

    async def beat() -> None: ...

    beats = [Heartbeat(period, lambda: True, beat, contextvars.copy_context()) for _ in range(20)]
    for heartbeat in beats:
        assert heartbeat.stop() == []  # stopped before any look: it never beat
    assert armed.count(period) == 1


async def test_a_due_heartbeat_beats_until_stopped():
    calls: list[float] = []
    due = [True]

    async def beat() -> None:
        calls.append(asyncio.get_running_loop().time())

    heartbeat = Heartbeat(PERIOD, lambda: due[0], beat, contextvars.copy_context())
    await asyncio.sleep(PERIOD * 6)
    assert 2 <= len(calls) <= 7
    due[0] = False  # nothing to extend: it looks, and does not beat
    seen = len(calls)
    await asyncio.sleep(PERIOD * 3)
    assert len(calls) <= seen + 1  # (a beat already under way when due turned off)
    due[0] = True
    heartbeat.stop()
    stopped = len(calls)
    await asyncio.sleep(PERIOD * 3)
    assert len(calls) == stopped


async def test_a_failed_beat_ends_the_heartbeat_and_its_task_holds_the_error():
    calls: list[int] = []

    async def beat() -> None:
        calls.append(1)
        raise RuntimeError("store down")

    heartbeat = Heartbeat(PERIOD, lambda: True, beat, contextvars.copy_context())
    await asyncio.sleep(PERIOD * 6)
    assert calls == [1]
    (task,) = heartbeat.stop()
    assert isinstance(task.exception(), RuntimeError)


async def test_sessions_of_two_claim_ttls_on_one_loop_both_keep_their_claims(tmp_path: Path):
    """Two runtimes with different TTLs, one loop: each session's claim is extended on its
    own period while its long effect runs."""
    app = Loom("beats")

    @app.effect("slow")
    async def slow(ctx: EffectContext, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @app.flow("f")
    async def f(ctx: FlowContext, seconds: float) -> str:
        return await ctx.execute(slow, seconds)

    store = SqliteEventStore(tmp_path / "l.db")
    short, long = Runtime(app, store, claim_ttl=0.2), Runtime(app, store, claim_ttl=0.5)
    results = await asyncio.gather(
        short.start("f", 0.7, execution_id="short"), long.start("f", 1.2, execution_id="long")
    )
    assert [r.status for r in results] == ["completed", "completed"]
    for rt, eid in ((short, "short"), (long, "long")):
        claims = [e for e in await rt.history(eid) if e.type == "ExecutionClaimed"]
        assert len(claims) >= 3  # the first claim, then extensions while the effect ran
        untils = [c.until for c in claims]  # type: ignore[attr-defined]
        assert untils == sorted(untils)
        ats = [c.at for c in claims]
        # never past its lease: each extension came before the claim it extends ran out
        assert all(later <= until for later, until in zip(ats[1:], untils, strict=False))
