"""Pub/Sub messages (the CloudEvent target's handler) carrying the attacks the HTTP routes
refuse: a signature whose expiry is no plain number, a resume of one of Loom's own gates,
a start whose input nests too deep.

A message that can never succeed must be rejected (acknowledged, nothing written): an
exception instead is a 500, and Pub/Sub redelivers it until its dead-letter policy gives
up, each time failing the same way. ``handle_event`` is the target's own handler, fed the
CloudEvent data functions-framework makes of a Pub/Sub push; the store is SQLite on disk.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from loom.errors import UnknownExecutionError
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.workers.auth import SharedSecretAuth, sign
from loom.workers.events_target import handle_event
from tests.functions.conftest import SECRET
from tests.functions.test_events_target import pubsub_data
from tests.security.audit.gates_app import app

CHECK = SharedSecretAuth(SECRET)


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    runtime = Runtime(app, SqliteEventStore(tmp_path / "events.db"))
    yield runtime
    await runtime.store.aclose()


def signed(message: dict[str, Any], signature: str | None = None) -> dict[str, Any]:
    data = pubsub_data(message, secret=SECRET)
    if signature is not None:
        data["message"]["attributes"]["loom-signature"] = signature
    return data


async def test_a_malformed_signature_expiry_is_rejected_not_redelivered(rt: Runtime) -> None:
    """Attack: ``loom-signature: t=²,...`` and ``t=<5000 digits>,...`` on a start and a
    resume. Promise: ``rejected`` with ``forbidden`` (acknowledged), nothing started (before,
    ``int("²")`` raised out of the handler: a 500 and a redelivery loop)."""
    await rt.start("nap", None, execution_id="n-1")
    before = await rt.history("n-1")
    messages = [
        {"action": "start", "flow": "nap", "input": None, "execution_id": "s-1"},
        {"action": "resume", "execution_id": "n-1", "on": "go", "correlation_key": "k"},
    ]
    for message in messages:
        for expires in ("²", "9" * 5000):
            data = signed(message, f"t={expires},sha256={'0' * 64}")
            outcome = await handle_event(rt, "ev-1", data, CHECK)
            assert outcome.outcome == "rejected", outcome
            assert outcome.error is not None and outcome.error["code"] == "forbidden"
    assert await rt.history("n-1") == before
    with pytest.raises(UnknownExecutionError):
        await rt.require("s-1")


async def test_a_signed_resume_of_a_timer_is_rejected(rt: Runtime) -> None:
    """Attack: a correctly signed message resuming the ``loom.timer`` gate of a day's sleep.
    Promise: ``rejected`` (``reserved_gate``), the sleep still waiting, nothing appended."""
    gate = (await rt.start("nap", None, execution_id="n-2")).waiting_on[0]
    before = await rt.history("n-2")
    message = {
        "action": "resume",
        "execution_id": "n-2",
        "on": gate.on,
        "correlation_key": gate.correlation_key,
    }
    outcome = await handle_event(rt, "ev-2", signed(message), CHECK)
    assert outcome.outcome == "rejected" and outcome.error is not None
    assert outcome.error["code"] == "reserved_gate"
    assert await rt.history("n-2") == before
    assert (await rt.result("n-2")).status == "suspended"


async def test_a_start_nested_too_deep_is_rejected_and_writes_nothing(rt: Runtime) -> None:
    """Attack: a signed start whose input nests arrays 300 levels deep. Promise: ``rejected``
    (``too_deep``, acknowledged: before, the serializer's bare ``ValueError`` escaped the
    handler), no execution."""
    deep = json.loads("[" * 300 + "]" * 300)
    raw = json.dumps({"action": "start", "flow": "nap", "input": deep, "execution_id": "b-1"})
    data = pubsub_data(json.loads(raw), secret=SECRET)
    data["message"]["attributes"]["loom-signature"] = sign(SECRET, "start", "b-1", raw.encode())
    outcome = await handle_event(rt, "ev-3", data, CHECK)
    assert outcome.outcome == "rejected" and outcome.error is not None
    assert outcome.error["code"] == "too_deep"
    with pytest.raises(UnknownExecutionError):
        await rt.require("b-1")
