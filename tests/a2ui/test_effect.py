"""Grain B: ``a2ui.callFunction`` as a non-idempotent effect keyed by ``ctx.idempotency_key``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from loom import FlowContext, Loom, Retry
from loom import events as ev
from loom.errors import ConfigurationError
from loom.plugins.a2ui import (
    A2UICallFunctionTransport,
    A2UICatalog,
    CallFunctionMessage,
    CallFunctionPayload,
    call_client_function,
    define_function,
    register_a2ui_call_function,
)
from loom.plugins.a2ui.protocol import WireInput
from loom.store import AppendRequest
from loom.testing import LoomTestEnv, replay
from loom.wire import ExecutionPackage

CATALOG = A2UICatalog(
    [
        define_function(
            "confirmAndSubmit",
            {
                "type": "object",
                "required": ["orderId", "total"],
                "properties": {
                    "orderId": {"type": "string"},
                    "total": {"type": "integer", "minimum": 0},
                },
            },
            {
                "type": "object",
                "required": ["submissionId"],
                "properties": {"submissionId": {"type": "string"}},
            },
        )
    ]
)
ARGS = {"orderId": "A-1", "total": 5}
Answer = Callable[[CallFunctionPayload], dict[str, Any]]


def not_a_reply(call: CallFunctionPayload) -> dict[str, Any]:
    return {"action": {"name": "x", "surfaceId": call.surfaceId}}


def answer(result: Any = None, **changes: Any) -> Answer:
    def reply(call: CallFunctionPayload) -> dict[str, Any]:
        body = {
            "surfaceId": call.surfaceId,
            "callId": call.callId,
            "name": call.name,
            "result": result,
            **changes,
        }
        return {"version": "v0.9", "functionResponse": body}

    return reply


class ScriptedTransport(A2UICallFunctionTransport):
    """Answers with a script, or hangs until cancelled."""

    def __init__(self, reply: Answer | None = None) -> None:
        self.reply = reply
        self.calls: list[CallFunctionMessage] = []
        self.cancelled = 0

    async def call(self, message: CallFunctionMessage) -> WireInput:
        self.calls.append(message)
        if self.reply is None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        assert self.reply is not None
        return self.reply(message.callFunction)


def make_app(
    transport: A2UICallFunctionTransport, *, timeout: float = 1.0, retry: Retry | None = None
) -> Loom:
    app = Loom("effect-tests")
    call_fn = register_a2ui_call_function(app, transport, timeout, catalog=CATALOG, retry=retry)

    @app.flow("submit")
    async def submit(ctx: FlowContext, args: dict[str, Any]) -> Any:
        return await call_client_function(
            ctx, call_fn, "s1", "confirmAndSubmit", args, catalog=CATALOG
        )

    return app


def effect_events(history: list[ev.Event]) -> list[ev.Event]:
    return [e for e in history if e.type.startswith("Effect")]


async def test_the_clients_result_is_the_steps_output_keyed_by_the_idempotency_key() -> None:
    transport = ScriptedTransport(answer({"submissionId": "sub-1"}))
    app = make_app(transport)
    env = LoomTestEnv(app)
    result = await env.start("submit", ARGS, execution_id="e1")
    assert (result.status, result.output) == ("completed", {"submissionId": "sub-1"})
    [sent] = transport.calls
    assert sent.callFunction.model_dump() == {
        "surfaceId": "s1",
        "callId": "e1:1",
        "name": "confirmAndSubmit",
        "args": ARGS,
        "callableFrom": None,
    }
    started, completed = effect_events(await env.history("e1"))
    assert isinstance(started, ev.EffectStarted) and started.idempotency_key == "e1:1"
    assert isinstance(completed, ev.EffectCompleted)
    assert completed.output == {"submissionId": "sub-1"}
    assert app.effects["a2ui.callFunction"].idempotent is False


async def test_replay_never_calls_the_transport() -> None:
    env = LoomTestEnv(make_app(ScriptedTransport(answer({"submissionId": "sub-1"}))))
    await env.start("submit", ARGS, execution_id="e1")
    outcome = await replay(
        make_app(ScriptedTransport(answer(error="must not be asked"))), await env.history("e1")
    )
    assert (outcome.status, outcome.output) == ("completed", {"submissionId": "sub-1"})


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (answer({"submissionId": "x"}, callId="e1:9"), "CorrelationError"),
        (answer({"submissionId": "x"}, surfaceId="s2"), "CorrelationError"),
        (answer({"submissionId": "x"}, name="getLocale"), "CorrelationError"),
        (answer({"submission": "x"}), "CatalogValidationError"),
        (answer(error={"code": "declined", "message": "user said no"}), "ClientFunctionError"),
        (not_a_reply, "A2UIProtocolError"),
    ],
    ids=[
        "other-call",
        "other-surface",
        "other-function",
        "invalid-result",
        "client-error",
        "not-a-reply",
    ],
)
async def test_a_reply_that_is_not_the_answer_fails_the_step_without_retry(
    reply: Answer, error_type: str
) -> None:
    transport = ScriptedTransport(reply)
    env = LoomTestEnv(make_app(transport, retry=Retry(max_attempts=3, initial_interval=0)))
    result = await env.start("submit", ARGS, execution_id="e1")
    assert result.status == "failed"
    assert len(transport.calls) == 1
    failed = effect_events(await env.history("e1"))[-1]
    assert isinstance(failed, ev.EffectFailed) and failed.error.type == error_type
    assert not any(e.type == "EffectCompleted" for e in await env.history("e1"))


async def test_the_request_timeout_cancels_the_transport_and_fails_the_step() -> None:
    transport = ScriptedTransport(None)
    env = LoomTestEnv(make_app(transport, timeout=0.1))
    began = time.monotonic()
    result = await env.start("submit", ARGS, execution_id="e1")
    assert time.monotonic() - began < 1.0
    assert result.status == "failed"
    assert transport.cancelled == 1
    failed = effect_events(await env.history("e1"))[-1]
    assert isinstance(failed, ev.EffectFailed) and failed.error.type == "A2UITimeoutError"
    assert "within 0.1s" in failed.error.message


async def test_a_retried_attempt_carries_the_same_call_id() -> None:
    transport = ScriptedTransport(None)
    env = LoomTestEnv(
        make_app(transport, timeout=0.05, retry=Retry(max_attempts=2, initial_interval=0))
    )
    result = await env.start("submit", ARGS, execution_id="e1")
    assert result.status == "failed"
    assert [m.callFunction.callId for m in transport.calls] == ["e1:1", "e1:1"]


async def test_arguments_are_checked_before_any_request_or_intent_record() -> None:
    transport = ScriptedTransport(answer({"submissionId": "x"}))
    env = LoomTestEnv(make_app(transport))
    result = await env.start("submit", {"orderId": "A-1"}, execution_id="e1")
    assert result.error is not None and result.error["type"] == "CatalogValidationError"
    assert transport.calls == []
    assert effect_events(await env.history("e1")) == []


async def in_doubt(env: LoomTestEnv, eid: str) -> None:
    """Leave the log as a worker killed mid-call does: an intent record, no outcome."""
    await env.start("submit", ARGS, execution_id=eid, run=False)
    intent = ev.EffectStarted(
        seq=2, step_id="1", effect="a2ui.callFunction", idempotency_key=f"{eid}:1"
    )
    await env.store.append(AppendRequest(eid, 1, [intent]))
    result = await env.runtime.execute(ExecutionPackage(execution_id=eid))
    assert result.status == "in_doubt"
    assert [d.idempotency_key for d in result.in_doubt] == [f"{eid}:1"]


async def test_an_in_doubt_call_is_resolved_by_verdict_and_the_output_validated() -> None:
    transport = ScriptedTransport(answer(error="must not be asked again"))
    env = LoomTestEnv(make_app(transport))
    await in_doubt(env, "e1")
    result = await env.runtime.verdict("e1", "1", "performed", output={"submissionId": "s-9"})
    assert (result.status, result.output) == ("completed", {"submissionId": "s-9"})
    await in_doubt(env, "e2")
    result = await env.runtime.verdict("e2", "1", "performed", output={"oops": True})
    assert result.error is not None and result.error["type"] == "CatalogValidationError"
    assert transport.calls == []


def test_the_request_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigurationError):
        register_a2ui_call_function(Loom("x"), ScriptedTransport(), 0)
