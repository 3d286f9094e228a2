"""The CloudEvent target: Pub/Sub messages that start or resume executions, idempotent on
redelivery, acknowledged unless a retry could succeed."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import functions_framework
import pytest

from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.workers.auth import SharedSecretAuth, sign
from loom.workers.events_target import (
    InvalidMessageError,
    RedeliverError,
    decode_pubsub,
    handle_event,
)
from tests.functions.conftest import MAIN, SECRET
from tests.functions.helpers import history

app = Loom("events-target-tests")
calls: list[str] = []


@app.effect("ev.note")
async def note(ctx: EffectContext, what: str) -> str:
    calls.append(ctx.idempotency_key)
    return what


@app.flow("gate")
async def gate(ctx: FlowContext, value: str) -> dict[str, Any]:
    first = await ctx.execute(note, value)
    got = await ctx.suspend(on="go", correlation_key=f"{ctx.execution_id}:go")
    return {"first": first, "got": got}


def pubsub_data(message: Any, message_id: str = "m-1", secret: str | None = None) -> dict[str, Any]:
    """CloudEvent data as functions-framework makes it from a Pub/Sub push (and Eventarc),
    signed with ``secret`` (the ``loom-signature`` attribute) when one is given."""
    raw = message if isinstance(message, bytes) else json.dumps(message).encode()
    attributes: dict[str, str] = {}
    if secret is not None and isinstance(message, dict):
        action, eid = str(message.get("action")), str(message.get("execution_id") or "")
        attributes["loom-signature"] = sign(secret, action, eid, raw)  # type: ignore[arg-type]
    return {
        "message": {
            "@type": "type.googleapis.com/google.pubsub.v1.PubsubMessage",
            "data": base64.b64encode(raw).decode(),
            "attributes": attributes,
            "messageId": message_id,
        },
        "subscription": "projects/p/subscriptions/s",
    }


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    calls.clear()
    runtime = Runtime(app, SqliteEventStore(tmp_path / "e.db"))  # no dispatcher: inline
    yield runtime
    await runtime.store.aclose()


def test_decode_reads_the_json_object_and_the_message_id() -> None:
    decoded, mid = decode_pubsub(pubsub_data({"action": "start"}, "42"))
    assert (decoded, mid) == ({"action": "start"}, "42")
    as_text = json.dumps(pubsub_data({"a": 1}))
    assert decode_pubsub(as_text)[0] == {"a": 1}


@pytest.mark.parametrize(
    "data",
    [
        None,
        "not json",
        {"no": "message"},
        {"message": {"data": "%%%"}},
        pubsub_data(b"not json"),
        pubsub_data([1, 2]),
    ],
)
def test_decode_refuses_what_is_not_a_pubsub_json_message(data: Any) -> None:
    with pytest.raises(InvalidMessageError):
        decode_pubsub(data)


async def test_a_start_without_id_is_named_after_the_message_and_redelivery_is_harmless(
    rt: Runtime,
) -> None:
    data = pubsub_data({"action": "start", "flow": "gate", "input": "x"}, "m-7")
    first = await handle_event(rt, "ce-1", data)
    assert (first.outcome, first.execution_id, first.status) == (
        "started",
        "pubsub-m-7",
        "suspended",
    )
    events = await rt.history("pubsub-m-7")
    for _ in range(3):  # Pub/Sub redelivers
        again = await handle_event(rt, "ce-1", data)
        assert (again.outcome, again.execution_id) == ("started", "pubsub-m-7")
    assert await rt.history("pubsub-m-7") == events
    assert calls == ["pubsub-m-7:1"]


async def test_a_signed_start_without_id_published_again_is_the_same_start(
    rt: Runtime,
) -> None:
    """Attack: the data and signature of a signed start, published again as a new Pub/Sub
    message (a new message id) while the signature is good. Promise: the execution is named
    after the signature, not the message id, so the copy starts nothing new."""
    check = SharedSecretAuth(SECRET)
    start = {"action": "start", "flow": "gate", "input": "x"}
    data = pubsub_data(start, "m-1", SECRET)
    first = await handle_event(rt, "ce-1", data, check)
    assert first.outcome == "started" and first.execution_id is not None
    assert first.execution_id.startswith("sig-")
    copy = {**data, "message": {**data["message"], "messageId": "m-2"}}
    again = await handle_event(rt, "ce-2", copy, check)
    assert (again.outcome, again.execution_id) == ("started", first.execution_id)
    assert [s.execution_id for s in await rt.list()] == [first.execution_id]
    assert calls == [f"{first.execution_id}:1"]


async def test_a_resume_is_delivered_once_however_often_it_arrives(rt: Runtime) -> None:
    await handle_event(
        rt,
        None,
        pubsub_data({"action": "start", "flow": "gate", "input": "x", "execution_id": "e1"}),
    )
    resume = {
        "action": "resume",
        "execution_id": "e1",
        "on": "go",
        "correlation_key": "e1:go",
        "payload": {"ok": True},
    }
    outcome = await handle_event(rt, "ce-2", pubsub_data(resume, "m-2"))
    assert (outcome.outcome, outcome.status) == ("resumed", "completed")
    events = await rt.history("e1")
    again = await handle_event(rt, "ce-2", pubsub_data(resume, "m-2"))
    assert (again.outcome, again.status) == ("resumed", "completed")  # a no-op redelivery
    assert await rt.history("e1") == events
    assert (await rt.result("e1")).output == {"first": "x", "got": {"ok": True}}


async def test_a_resume_before_its_start_asks_for_redelivery(rt: Runtime) -> None:
    resume = {"action": "resume", "execution_id": "later", "on": "go", "correlation_key": "k"}
    with pytest.raises(RedeliverError):
        await handle_event(rt, "ce", pubsub_data(resume))


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"action": "start", "flow": "nope"}, "unknown_flow"),
        ({"action": "stop", "execution_id": "e"}, "invalid_message"),
        ({"action": "resume", "execution_id": "e"}, "invalid_message"),
        ({"action": "start", "flow": "gate", "extra": 1}, "invalid_message"),
    ],
)
async def test_what_can_never_succeed_is_acknowledged_and_reported(
    rt: Runtime, message: dict[str, Any], code: str
) -> None:
    outcome = await handle_event(rt, "ce", pubsub_data(message))
    assert outcome.outcome == "rejected"
    assert outcome.error is not None and outcome.error["code"] == code


async def test_a_conflicting_start_is_rejected_not_retried(rt: Runtime) -> None:
    start = {"action": "start", "flow": "gate", "input": "x", "execution_id": "e1"}
    await handle_event(rt, "a", pubsub_data(start, "m-a"))
    other = await handle_event(rt, "b", pubsub_data({**start, "input": "y"}, "m-b"))
    assert (other.outcome, other.error and other.error["code"]) == ("rejected", "conflict")


def test_the_functions_framework_target_takes_a_raw_pubsub_push(
    worker_env: dict[str, str], runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_DISPATCH", "inline://")
    target = functions_framework.create_app("events", str(MAIN)).test_client()
    start = {"action": "start", "flow": "echo", "input": {"n": 2}, "execution_id": "ps-1"}
    push = pubsub_data(start, "77")
    response = target.post("/", json=push)
    assert response.status_code == 200, response.data
    assert history(runtime, "ps-1")[-1].type == "ExecutionCompleted"
    early = {"action": "resume", "execution_id": "ps-404", "on": "go", "correlation_key": "k"}
    # functions-framework answers 500 when the function raises: Pub/Sub redelivers.
    assert target.post("/", json=pubsub_data(early, "78", SECRET)).status_code == 500


def test_a_store_failure_is_a_503_and_the_message_is_redelivered(
    worker_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that cannot be opened (its directory is a file) answers 503, never 500."""
    (tmp_path / "not-a-dir").write_text("x")
    monkeypatch.setenv("LOOM_STORE", f"sqlite:///{tmp_path / 'not-a-dir' / 'loom.db'}")
    monkeypatch.setenv("LOOM_DISPATCH", "inline://")
    target = functions_framework.create_app("events", str(MAIN)).test_client()
    start = {"action": "start", "flow": "echo", "input": {"n": 2}, "execution_id": "ps-9"}
    response = target.post("/", json=pubsub_data(start, "90"))
    assert response.status_code == 503, response.data
    assert int(response.headers["Retry-After"]) >= 1
    assert json.loads(response.data)["code"] == "store_unavailable"
