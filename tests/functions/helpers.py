"""Helpers shared by the HTTP worker tests."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from loom import events as ev
from loom.runtime import Runtime
from loom.store.base import AppendRequest, StatusChange

ERROR_KEYS = {"code", "message", "details"}


def seed(runtime: Runtime, flow: str, value: Any, execution_id: str) -> None:
    """Create an execution without running it (what a dispatcher would then deliver)."""
    asyncio.run(aseed(runtime, flow, value, execution_id))


async def aseed(runtime: Runtime, flow: str, value: Any, execution_id: str) -> None:
    """:func:`seed`, from a coroutine."""
    await runtime.start(flow, value, execution_id=execution_id, run=False)


def seed_in_doubt(runtime: Runtime, execution_id: str, amount: int = 5) -> None:
    """A ``pay`` execution whose charge has an intent record and no outcome (a crash)."""
    seed(runtime, "pay", amount, execution_id)
    intent = ev.EffectStarted(
        step_id="1",
        effect="t.charge",
        attempt=1,
        idempotency_key=f"{execution_id}:1",
        seq=2,
        at=1.0,
    )
    asyncio.run(
        runtime.store.append(AppendRequest(execution_id, 1, [intent], StatusChange("running")))
    )


def history(runtime: Runtime, execution_id: str) -> list[ev.Event]:
    """The execution's events, read from the store."""
    return asyncio.run(runtime.history(execution_id))


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The answer is ``status`` with the JSON error body (and ``code``, if given)."""
    assert response.status_code == status, (response.status_code, response.data)
    assert response.headers["Content-Type"].startswith("application/json")
    body = json.loads(response.data)
    assert set(body) == ERROR_KEYS, body
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["details"], dict)
    if code is not None:
        assert body["code"] == code, body
    return body
