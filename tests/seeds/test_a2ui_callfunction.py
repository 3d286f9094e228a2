"""A2UI callFunction: a renderer function called from a flow, with no renderer-side
runtime (the plugin's public API over ``LoomTestEnv``'s real runtime and store).

The transports are stand-ins for a renderer (none runs in a unit test); the renderer's
replies they return are the wire messages of the protocol.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loom import FlowContext, Loom
from loom import events as ev
from loom.events import TERMINAL_TYPES
from loom.plugins.a2ui import (
    A2UI_FUNCTION_RESULT,
    CALL_FUNCTION_EFFECT,
    A2UICallFunctionTransport,
    A2UIMessageSender,
    A2UISurfaceBridge,
    CallRendererFunctionMessage,
    call_client_function,
    deliver_function_response,
    register_a2ui_call_function,
    register_a2ui_sender,
    request_client_function,
)
from loom.plugins.a2ui.protocol import WireInput
from loom.testing import LoomTestEnv, replay
from tests.a2ui.test_effect import ARGS, CATALOG, answer
from tests.a2ui.test_gate import CATALOG as GATE_CATALOG
from tests.a2ui.test_gate import RecordingSender, RefusingSender
from tests.a2ui.test_gate import make_app as gate_app
from tests.a2ui.test_gate import reply as gate_reply


class LogReadingTransport(A2UICallFunctionTransport):
    """Answers every call, and keeps what the execution's log held when it was asked."""

    def __init__(self) -> None:
        self.env: LoomTestEnv | None = None
        self.calls: list[CallRendererFunctionMessage] = []
        self.log_when_asked: list[list[ev.Event]] = []

    async def call(self, surface_id: str, message: CallRendererFunctionMessage) -> WireInput:
        assert self.env is not None
        self.calls.append(message)
        key = message.callRendererFunction.functionCallId
        self.log_when_asked.append(await self.env.history(key.split(":", 1)[0]))
        return answer({"submissionId": f"sub-{key}"})(message)


def make_app(transport: A2UICallFunctionTransport, requires: tuple[str, ...] = ()) -> Loom:
    app = Loom("seed-a2ui")
    call_fn = register_a2ui_call_function(app, transport, 5.0, catalog=CATALOG, requires=requires)

    @app.flow("submit")
    async def submit(ctx: FlowContext, args: dict[str, Any]) -> Any:
        return await call_client_function(
            ctx, call_fn, "s1", "confirmAndSubmit", args, catalog=CATALOG
        )

    return app


def test_the_grain_b_effect_is_declared_non_idempotent() -> None:
    """Checks: "Registers an a2ui.callFunction effect" … "The effect is declared
    idempotent: false"."""
    app = Loom("seed-a2ui-def")
    effect = register_a2ui_call_function(app, LogReadingTransport(), 5.0)
    assert effect.name == CALL_FUNCTION_EFFECT == "a2ui.callFunction"
    assert effect.idempotent is False


async def test_the_intent_is_recorded_before_the_renderer_is_asked_under_its_step_key() -> None:
    """Checks: "keyed by callId = ctx.idempotencyKey (= executionId:stepId)", "The result
    becomes the step's STEP_COMPLETED output", and "a crash mid-call routes through the
    existing K9 in-doubt guard": the intent record is in the log before the transport is
    called, so a crash during the call leaves a step in doubt, not one to run again."""
    transport = LogReadingTransport()
    env = LoomTestEnv(make_app(transport))
    transport.env = env
    result = await env.start("submit", ARGS, execution_id="e1")
    assert (result.status, result.output) == ("completed", {"submissionId": "sub-e1:1"})
    [call] = transport.calls
    assert call.callRendererFunction.functionCallId == "e1:1"
    [seen] = transport.log_when_asked
    started = [e for e in seen if isinstance(e, ev.EffectStarted)]
    assert [(e.effect, e.idempotency_key) for e in started] == [("a2ui.callFunction", "e1:1")]
    assert not any(isinstance(e, ev.EffectCompleted) for e in seen)
    done = [e for e in await env.history("e1") if isinstance(e, ev.EffectCompleted)]
    assert [e.output for e in done] == [{"submissionId": "sub-e1:1"}]


async def test_grain_b_adds_no_event_type() -> None:
    """Checks: "No new event types; EVENT_SCHEMA and KERNEL_ABI unchanged" (for the
    delegated-effect grain: the round-trip rides the step's own events)."""
    transport = LogReadingTransport()
    env = LoomTestEnv(make_app(transport))
    transport.env = env
    await env.start("submit", ARGS, execution_id="e1")
    types = {e.type for e in await env.history("e1")}
    assert types <= {
        "ExecutionStarted",
        "ExecutionClaimed",
        "EffectStarted",
        "EffectCompleted",
        *TERMINAL_TYPES,
    }, types


async def test_grain_b_runs_through_the_capability_check() -> None:
    """Checks: "Grain B runs through the EffectRuntime, so K2 authorization … appl[ies]":
    an execution not granted what the effect requires fails the step and the renderer is
    never asked; one granted it gets its answer."""
    transport = LogReadingTransport()
    env = LoomTestEnv(make_app(transport, requires=("ui.submit",)))
    transport.env = env
    refused = await env.start("submit", ARGS, execution_id="e1")
    assert refused.status == "failed"
    assert refused.error is not None and "ui.submit" in refused.error["message"]
    assert transport.calls == []
    granted = await env.start("submit", ARGS, execution_id="e2", capabilities=["ui.submit"])
    assert (granted.status, granted.output) == ("completed", {"submissionId": "sub-e2:1"})


async def test_grain_a_the_app_ingests_the_reply_and_resumes_the_gate_itself() -> None:
    """Checks: "the app calls bridge.ingestFunctionResponse(msg) → runtime.resume(executionId,
    { eventType: "A2UIFunctionResult", payload })" … "The result is a recorded fact; replay
    is a pure fold": the application's own resume, with the payload the bridge normalized,
    completes the flow, and replay serves it without the renderer."""
    sender = RecordingSender()
    env = LoomTestEnv(gate_app(sender))
    waiting = await env.start("one", "s1", execution_id="e1")
    [gate] = waiting.waiting_on
    [sent] = sender.sent
    key = sent.callRendererFunction.functionCallId
    assert (gate.on, gate.correlation_key) == (A2UI_FUNCTION_RESULT, key)

    bridge = A2UISurfaceBridge("s1", catalog_id=GATE_CATALOG.catalog_id)
    reply = bridge.ingest_function_response(
        gate_reply(sent, value={"locale": "fr-FR"}), expected_call_id=key
    )
    done = await env.runtime.resume("e1", A2UI_FUNCTION_RESULT, key, reply.to_wire())
    assert (done.status, done.output) == ("completed", {"locale": "fr-FR"})
    replayed = await replay(gate_app(RefusingSender()), await env.history("e1"))
    assert (replayed.status, replayed.output) == ("completed", {"locale": "fr-FR"})


def mixed_app(sender: A2UIMessageSender) -> Loom:
    app = Loom("seed-a2ui-gates")
    send = register_a2ui_sender(app, sender, catalogs=[GATE_CATALOG])

    @app.flow("form")
    async def form(ctx: FlowContext, surface: str) -> list[Any]:
        # A function call and a user action awaited at once: two gates, either order.
        return list(
            await asyncio.gather(
                request_client_function(ctx, send, surface, "getLocale", catalog=GATE_CATALOG),
                ctx.suspend("A2UIAction", f"{ctx.execution_id}:submit"),
            )
        )

    return app


async def test_grain_a_rides_the_same_gates_as_an_action() -> None:
    """Checks: "Reuses the exact machinery the action path uses today (multi-gate
    passthrough)": a function-result gate and an action gate wait side by side, each
    resumed by its own reply, in either order; replay is a pure fold."""
    sender = RecordingSender()
    env = LoomTestEnv(mixed_app(sender))
    waiting = await env.start("form", "s1", execution_id="e1")
    [sent] = sender.sent
    key = sent.callRendererFunction.functionCallId
    assert {(g.on, g.correlation_key) for g in waiting.waiting_on} == {
        (A2UI_FUNCTION_RESULT, key),
        ("A2UIAction", "e1:submit"),
    }
    bridge = A2UISurfaceBridge("s1", catalog_id=GATE_CATALOG.catalog_id)
    pressed = {
        "name": "submit",
        "surfaceId": "s1",
        "sourceComponentId": "send",
        "timestamp": "2026-01-01T00:00:00Z",
        "context": {},
    }
    action = bridge.ingest_action({"version": "v1.0", "action": pressed})
    after_action = await env.runtime.resume("e1", "A2UIAction", "e1:submit", action.to_wire())
    assert [g.on for g in after_action.waiting_on] == [A2UI_FUNCTION_RESULT]
    done = await deliver_function_response(
        env.runtime, "e1", gate_reply(sent, value={"locale": "fr-FR"})
    )
    assert done.status == "completed"
    assert done.output is not None and done.output[0] == {"locale": "fr-FR"}
    assert done.output[1]["name"] == "submit"
    replayed = await replay(mixed_app(RefusingSender()), await env.history("e1"))
    assert (replayed.status, replayed.output) == ("completed", done.output)


async def test_a_flow_author_executes_the_effect_directly() -> None:
    """Checks: "a flow author writes await ctx.execute(callFn, input)": the effect's input
    as plain JSON, its result the step's value."""
    transport = LogReadingTransport()
    app = Loom("seed-a2ui-direct")
    call_fn = register_a2ui_call_function(app, transport, 5.0, catalog=CATALOG)

    @app.flow("direct")
    async def direct(ctx: FlowContext, args: dict[str, Any]) -> Any:
        request = {"surfaceId": "s1", "name": "confirmAndSubmit", "catalogId": "c", "args": args}
        return await ctx.execute(call_fn, request)

    env = LoomTestEnv(app)
    transport.env = env
    result = await env.start("direct", ARGS, execution_id="e1")
    assert (result.status, result.output) == ("completed", {"submissionId": "sub-e1:1"})
    [call] = transport.calls
    assert call.callRendererFunction.callFunction.catalogId == "c"
    assert call.callRendererFunction.callFunction.args == ARGS
