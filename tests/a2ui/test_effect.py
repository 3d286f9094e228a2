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
    CallRendererFunctionMessage,
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
        ),
        define_function("openUrl", allowed_callers="rendererOnly"),
    ],
    catalog_id="example.com:effect-tests/v1",
)
ARGS = {"orderId": "A-1", "total": 5}
Answer = Callable[[CallRendererFunctionMessage], dict[str, Any]]


def not_a_reply(call: CallRendererFunctionMessage) -> dict[str, Any]:
    return {"version": "v1.0", "action": {"name": "x", "surfaceId": "s1"}}


def answer(value: Any = None, *, version: str = "v1.0", **changes: Any) -> Answer:
    def reply(call: CallRendererFunctionMessage) -> dict[str, Any]:
        outcome = changes.pop("error", None)
        body: dict[str, Any] = {"functionCallId": call.callRendererFunction.functionCallId}
        body.update({"error": outcome} if outcome is not None else {"value": value})
        body.update(changes)
        changes["error"] = outcome  # the same answer on every call
        return {"version": version, "rendererFunctionResponse": body}

    return reply


class ScriptedTransport(A2UICallFunctionTransport):
    """Answers with a script, or hangs until cancelled."""

    def __init__(self, reply: Answer | None = None) -> None:
        self.reply = reply
        self.calls: list[CallRendererFunctionMessage] = []
        self.surfaces: list[str] = []
        self.cancelled = 0

    async def call(self, surface_id: str, message: CallRendererFunctionMessage) -> WireInput:
        self.calls.append(message)
        self.surfaces.append(surface_id)
        if self.reply is None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        assert self.reply is not None
        return self.reply(message)


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

    @app.flow("unchecked")
    async def unchecked(ctx: FlowContext, name: str) -> Any:
        # No catalog on Loom's side: the renderer alone decides, and may refuse.
        return await call_client_function(ctx, call_fn, "s1", name, catalog_id=CATALOG.catalog_id)

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
    assert transport.surfaces == ["s1"]
    assert sent.to_wire() == {
        "version": "v1.0",
        "callRendererFunction": {
            "functionCallId": "e1:1",
            "callFunction": {
                "call": "confirmAndSubmit",
                "args": ARGS,
                "catalogId": "example.com:effect-tests/v1",
            },
        },
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
        (answer({"submission": "x"}), "CatalogValidationError"),
        (answer(error={"code": "declined", "message": "user said no"}), "ClientFunctionError"),
        (
            answer(error={"code": "INVALID_FUNCTION_CALL", "message": "not for agents"}),
            "ClientFunctionError",
        ),
    ],
    ids=["invalid-result", "renderer-error", "renderer-refused"],
)
async def test_an_answer_to_the_call_that_is_not_a_success_fails_the_step_without_retry(
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


@pytest.mark.parametrize(
    "reply",
    [
        answer({"submissionId": "x"}, functionCallId="e1:9"),
        answer({"submissionId": "x"}, version="v0.9"),
        not_a_reply,
    ],
    ids=["other-call", "other-version", "not-a-reply"],
)
async def test_a_reply_that_does_not_answer_the_call_parks_the_step_in_doubt(
    reply: Answer,
) -> None:
    """A custom transport handed back something else: whether the function ran is unknown."""
    transport = ScriptedTransport(reply)
    env = LoomTestEnv(make_app(transport, retry=Retry(max_attempts=3, initial_interval=0)))
    result = await env.start("submit", ARGS, execution_id="e1")
    assert result.status == "in_doubt"
    assert [d.idempotency_key for d in result.in_doubt] == ["e1:1"]
    assert len(transport.calls) == 1  # never asked again on its own
    types = [e.type for e in effect_events(await env.history("e1"))]
    assert types == ["EffectStarted", "EffectInDoubt"]
    result = await env.runtime.verdict("e1", "1", "performed", output={"submissionId": "s-7"})
    # Should this ever fail again, the log and the calls say which way it went (the verdict
    # not written, the step parked again, or the renderer asked a second time).
    log = [(e.seq, e.type) for e in await env.history("e1")]
    assert (result.status, result.output) == ("completed", {"submissionId": "s-7"}), (
        f"{result.status} at seq {result.last_seq}; log {log}; calls {len(transport.calls)}"
    )
    assert len(transport.calls) == 1


async def test_a_function_the_renderer_refuses_is_a_clear_step_failure() -> None:
    refusal = answer(error={"code": "INVALID_FUNCTION_CALL", "message": "rendererOnly"})
    env = LoomTestEnv(make_app(ScriptedTransport(refusal)))
    result = await env.start("unchecked", "openUrl", execution_id="e1")
    assert result.status == "failed" and result.error is not None
    assert "INVALID_FUNCTION_CALL" in result.error["message"]


async def test_a_function_loom_knows_is_renderer_only_is_never_sent() -> None:
    transport = ScriptedTransport(answer(None))
    app = make_app(transport)
    call_fn = app.effects["a2ui.callFunction"]

    @app.flow("ui-only")
    async def ui_only(ctx: FlowContext, _: None) -> Any:
        return await call_client_function(ctx, call_fn, "s1", "openUrl", {}, catalog=CATALOG)

    env = LoomTestEnv(app)
    result = await env.start("ui-only", None, execution_id="e1")
    assert result.error is not None and result.error["type"] == "CatalogValidationError"
    assert transport.calls == []


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
    assert [m.callRendererFunction.functionCallId for m in transport.calls] == ["e1:1", "e1:1"]


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
