"""Grain A: a renderer function as a gate — send the request, suspend, resume with the reply.

Flow side, :func:`request_client_function`::

    send = register_a2ui_sender(app, sender, catalogs=[CATALOG])   # once, at app set-up

    @app.flow("profile.locale")
    async def locale(ctx: FlowContext, surface: str) -> str:
        return await request_client_function(ctx, send, surface, "getLocale", catalog=CATALOG)

The ``callRendererFunction`` goes out through the idempotent effect ``a2ui.send`` (recorded
once, so a replay does not send it again; a crash before it was recorded sends it again with
the same ``functionCallId``). The flow then waits on
``ctx.suspend(on="A2UIFunctionResult", correlation_key=functionCallId)``.

Application side, :func:`deliver_function_response`: authenticate the request (when an
authenticator is configured), check the reply answers a call this execution issued and still
awaits, validate the result against the catalog, and ``runtime.resume`` the gate. The same
checks guard every other route to the gate: :func:`register_a2ui_sender` registers them as
the app's resume check for ``A2UIFunctionResult``, so a forged payload sent through the
worker's generic resume endpoint is refused with nothing appended.

Call ids are call-site-unique: by default ``{execution_id}:{name}#{step}`` from the send
step's position, and an id derived only from the function name (``getLocale`` or
``{execution_id}:getLocale``) gets the same ``#{step}`` suffix, so two calls of one function
in one execution can never take each other's replies.
"""

from __future__ import annotations

import abc
import asyncio
import json
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loom.app import EffectDef, FlowContext, Loom, Retry
from loom.errors import ConfigurationError, GateTimedOutError
from loom.kernel.context import EffectContext
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.late_replies import timed_out_gate
from loom.plugins.a2ui.auth import ResumeAuthenticator
from loom.plugins.a2ui.bridge import A2UISurfaceBridge
from loom.plugins.a2ui.capabilities import RendererCapabilities
from loom.plugins.a2ui.catalog import A2UICatalog
from loom.plugins.a2ui.errors import (
    A2UIProtocolError,
    ClientFunctionError,
    CorrelationError,
    LateReplyError,
    ResumeAuthenticationError,
)
from loom.plugins.a2ui.protocol import (
    CallRendererFunctionMessage,
    FunctionResponse,
    WireInput,
    parse_function_outcome,
)

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

A2UI_FUNCTION_RESULT = "A2UIFunctionResult"
"""The ``on`` of every grain-A gate."""

SEND_EFFECT = "a2ui.send"
"""The default name of the effect that sends grain-A requests."""


class A2UIMessageSender(abc.ABC):
    """Delivers agent→renderer messages to a surface's renderer (SSE, a queue, a push)."""

    @abc.abstractmethod
    async def send(
        self, execution_id: str, surface_id: str, message: CallRendererFunctionMessage
    ) -> None:
        """Deliver ``message`` to ``surface_id``'s renderer (possibly again: same call id)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class SendCallFunction(BaseModel):
    """Input of the send effect: what to ask, of which surface, from which catalog."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    surfaceId: str = Field(min_length=1)
    name: str = Field(min_length=1)
    catalogId: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    callId: str | None = None


class SentCall(BaseModel):
    """Loom's record of a call it sent: what a reply is matched against.

    Official replies name only the ``functionCallId``; the surface, the function and the
    catalog come from here.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    surfaceId: str
    functionCallId: str
    name: str
    catalogId: str
    args: dict[str, Any] | None = None


def gate_call_id(execution_id: str, step_id: str, name: str, requested: str | None) -> str:
    """The call id a grain-A request carries: call-site-unique and deterministic.

    ``requested`` is used as given unless it is derived only from the function name (``name``
    or ``{execution_id}:{name}``), which would collide when the function is called twice in
    one execution; then, as when none is given, the send step's id makes it unique.
    """
    if requested is None:
        return f"{execution_id}:{name}#{step_id}"
    if requested in (name, f"{execution_id}:{name}"):
        return f"{requested}#{step_id}"
    return requested


def register_a2ui_sender(
    app: Loom,
    sender: A2UIMessageSender,
    *,
    catalogs: Iterable[A2UICatalog] = (),
    name: str = SEND_EFFECT,
    retry: Retry | None = None,
) -> EffectDef:
    """Register the idempotent effect that sends grain-A requests, and the gates' check.

    The effect's output is a :class:`SentCall`, so the log records exactly what the renderer
    was asked and under which call id. Every resume of an ``A2UIFunctionResult`` gate, by
    any route, must then answer a call this execution sent and still awaits; results of
    functions of ``catalogs`` are validated against their ``returns`` schema.
    """

    async def a2ui_send(ctx: EffectContext, request: SendCallFunction) -> SentCall:
        call_id = gate_call_id(ctx.execution_id, ctx.step_id, request.name, request.callId)
        bridge = A2UISurfaceBridge(request.surfaceId, catalog_id=request.catalogId)
        message = bridge.call_function(request.name, request.args, call_id=call_id)
        await sender.send(ctx.execution_id, request.surfaceId, message)
        return SentCall(
            surfaceId=request.surfaceId,
            functionCallId=call_id,
            name=request.name,
            catalogId=request.catalogId,
            args=request.args,
        )

    by_id = {c.catalog_id: c for c in catalogs}

    async def check(runtime: Runtime, state: ExecutionState, key: str, payload: Any) -> Any:
        return await admit_reply(runtime, state, key, payload, by_id, name)

    app.resume_check(A2UI_FUNCTION_RESULT)(check)
    policy = retry or Retry(max_attempts=3, initial_interval=0.05)
    return app.effect(name, idempotent=True, retry=policy)(a2ui_send)


def _catalog_id(catalog: A2UICatalog | None, catalog_id: str | None) -> str:
    if catalog_id is not None:
        return catalog_id
    if catalog is None:
        raise ConfigurationError("a renderer function call needs catalog= or catalog_id=")
    return catalog.catalog_id


async def request_client_function(
    ctx: FlowContext,
    send: EffectDef,
    surface_id: str,
    name: str,
    args: Mapping[str, Any] | None = None,
    *,
    catalog: A2UICatalog | None = None,
    catalog_id: str | None = None,
    call_id: str | None = None,
    timeout: timedelta | float | None = None,
    renderer: RendererCapabilities | None = None,
) -> Any:
    """Ask the renderer of ``surface_id`` to run ``name`` and wait (durably) for its result.

    Args:
        ctx: The flow's context.
        send: The effect from :func:`register_a2ui_sender`.
        surface_id: The surface whose renderer runs the function.
        name: The catalog function.
        args: Its arguments (checked against the catalog first, when one is given).
        catalog: Declares the function: who may call it, its arguments and its result.
        catalog_id: The catalog's id when no ``catalog`` is given.
        call_id: A call-site-unique id; by default one is derived from the send step.
        timeout: How long the gate waits; then :class:`~loom.errors.GateTimeoutError`.
        renderer: What the renderer advertised; a call outside it is refused.

    Returns:
        The renderer's result (validated against the catalog's ``returns``, when given).

    Raises:
        CatalogValidationError: Not callable by an agent, not advertised, or arguments or
            result that fail the catalog.
        ClientFunctionError: The renderer answered with an error (or refused the call).
        GateTimeoutError: No reply within ``timeout``.
    """
    cid = _catalog_id(catalog, catalog_id)
    if catalog is not None:
        args = catalog.callable_by_agent(name).validate_args(args)
    if renderer is not None:
        renderer.check_call(cid, name)
    request = SendCallFunction(
        surfaceId=surface_id,
        name=name,
        catalogId=cid,
        args=dict(args or {}) or None,
        callId=call_id,
    )
    sent: SentCall = await ctx.execute(send, request)
    payload = await ctx.suspend(
        on=A2UI_FUNCTION_RESULT, correlation_key=sent.functionCallId, timeout=timeout
    )
    return result_of(sent, payload, catalog)


def _as_reply(sent_call_id: str, payload: Any) -> FunctionResponse:
    try:
        reply = FunctionResponse.model_validate(payload)
    except ValidationError as exc:
        raise A2UIProtocolError(
            f"resume payload for call {sent_call_id!r} is not a function response: "
            f"{exc.errors()[0]['msg']}"
        ) from None
    if reply.functionCallId != sent_call_id:
        raise CorrelationError(
            f"reply answers call {reply.functionCallId!r}, expected {sent_call_id!r}",
            details={"functionCallId": reply.functionCallId, "expected": sent_call_id},
        )
    return reply


def result_of(sent: SentCall, payload: Any, catalog: A2UICatalog | None) -> Any:
    """Check a resume payload against the call it answers and return its result.

    On replay the same recorded payload gives the same answer.
    """
    reply = _as_reply(sent.functionCallId, payload)
    if reply.error is not None:
        raise ClientFunctionError(
            f"renderer function {sent.name!r} (call {sent.functionCallId!r}) failed: "
            f"{reply.error.code}: {reply.error.message}",
            details={"functionCallId": sent.functionCallId, "error": reply.error.to_wire()},
        )
    return catalog.validate_result(sent.name, reply.value) if catalog else reply.value


# -- application side ------------------------------------------------------------------------


async def _sent_calls(
    runtime: Runtime, state: ExecutionState, send_effect: str
) -> tuple[dict[str, SentCall], set[str]]:
    pending: dict[str, SentCall] = {}
    answered: set[str] = set()
    for rec in state.steps.values():
        if rec.get("effect") != send_effect or rec.get("status") != "completed":
            continue
        output = await runtime.payloads.decode(rec.get("output"), state.execution_id)
        sent = SentCall.model_validate(output)
        if resume_key(A2UI_FUNCTION_RESULT, sent.functionCallId) in state.resumes:
            answered.add(sent.functionCallId)
        else:
            pending[sent.functionCallId] = sent
    return pending, answered


async def pending_function_calls(
    runtime: Runtime, execution_id: str, *, send_effect: str = SEND_EFFECT
) -> tuple[dict[str, SentCall], set[str]]:
    """The grain-A calls of an execution, by call id: ``(awaiting a reply, answered)``.

    Read from the folded state (snapshot + tail), not the whole log. A call awaits a reply
    once its send step is recorded and until a resume for its call id is (a reply, or the
    gate's timeout).
    """
    return await _sent_calls(runtime, await runtime.load_state(execution_id), send_effect)


def _unawaited(execution_id: str, call_id: str, answered: set[str]) -> CorrelationError:
    if call_id in answered:
        return CorrelationError(
            f"call {call_id!r} of execution {execution_id!r} was already answered or timed "
            "out; late reply refused",
            details={"functionCallId": call_id, "reason": "late"},
        )
    return CorrelationError(
        f"execution {execution_id!r} issued no call {call_id!r}; unsolicited reply refused",
        details={"functionCallId": call_id, "reason": "unsolicited"},
    )


async def admit_reply(
    runtime: Runtime,
    state: ExecutionState,
    call_id: str,
    payload: Any,
    catalogs: Mapping[str, A2UICatalog],
    send_effect: str = SEND_EFFECT,
) -> dict[str, Any]:
    """The resume check of ``A2UIFunctionResult`` gates: admit a reply, or refuse it.

    Raises:
        A2UIProtocolError: The payload is not a function response.
        CorrelationError: It answers another call, or a call not awaiting a reply.
        CatalogValidationError: The result fails the function's ``returns`` schema.
    """
    reply = _as_reply(call_id, payload)
    pending, answered = await _sent_calls(runtime, state, send_effect)
    sent = pending.get(call_id)
    if sent is None:
        raise _unawaited(state.execution_id, call_id, answered)
    catalog = catalogs.get(sent.catalogId)
    if catalog is not None and reply.error is None and sent.name in catalog:
        catalog.validate_result(sent.name, reply.value)
    return reply.to_wire()


async def deliver_function_response(
    runtime: Runtime,
    execution_id: str,
    message: WireInput,
    *,
    headers: Mapping[str, str] | None = None,
    authenticate: ResumeAuthenticator | None = None,
    catalog: A2UICatalog | None = None,
    send_effect: str = SEND_EFFECT,
    grace: float = 0.5,
) -> ExecutionResult:
    """Resume a grain-A gate with a renderer's reply, after checking it.

    Args:
        runtime: The runtime of the execution.
        execution_id: The execution that issued the call.
        message: The request body as received (bytes or text, so an authenticator can check
            the exact bytes), or a decoded message: a ``rendererFunctionResponse``, or an
            ``error`` naming the call's ``functionCallId``.
        headers: The request's headers, for the authenticator.
        authenticate: Admits or refuses the request; refused → nothing is resumed.
        catalog: Validates the result before it becomes a recorded fact.
        send_effect: The name the send effect was registered under.
        grace: Seconds to wait for the log to record a send the renderer already answered
            (the reply can overtake the send effect's completion record).

    Raises:
        ResumeAuthenticationError: The authenticator refused the request.
        A2UIProtocolError: Another version, or not an answer to a call.
        CorrelationError: Not a reply to a call this execution awaits (unsolicited, forged,
            late).
        LateReplyError: The call's gate timed out before this reply (a
            ``CorrelationError`` and a ``GateTimedOutError``: 409 ``gate_timed_out``).
        CatalogValidationError: The result fails the catalog.
    """
    if authenticate is not None and not authenticate(dict(headers or {}), _body_bytes(message)):
        raise ResumeAuthenticationError(
            f"reply for execution {execution_id!r} refused by the authenticator"
        )
    reply = parse_function_outcome(message)
    sent = await _awaited_call(runtime, execution_id, reply.functionCallId, send_effect, grace)
    if catalog is not None and reply.error is None:
        catalog.validate_result(sent.name, reply.value)
    try:
        return await runtime.resume(
            execution_id, A2UI_FUNCTION_RESULT, reply.functionCallId, reply.to_wire()
        )
    except GateTimedOutError as exc:  # its deadline passed, its timer not run yet
        raise _late(exc, reply.functionCallId) from None


def _late(late: GateTimedOutError, call_id: str) -> LateReplyError:
    details = {**late.details, "functionCallId": call_id, "reason": "late"}
    return LateReplyError(f"{late.message} (late reply)", details=details)


async def _awaited_call(
    runtime: Runtime, execution_id: str, call_id: str, send_effect: str, grace: float
) -> SentCall:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while True:
        state = await runtime.load_state(execution_id)
        pending, answered = await _sent_calls(runtime, state, send_effect)
        if call_id in pending:
            return pending[call_id]
        if call_id in answered or loop.time() >= deadline:
            # (a call whose gate timed out: refused as every route refuses it, 409)
            late = timed_out_gate(state, A2UI_FUNCTION_RESULT, call_id)
            if late is not None:
                raise _late(late, call_id)
            raise _unawaited(execution_id, call_id, answered)
        await asyncio.sleep(0.02)


def _body_bytes(message: WireInput) -> bytes:
    if isinstance(message, bytes):
        return message
    if isinstance(message, str):
        return message.encode()
    if isinstance(message, BaseModel):
        return message.model_dump_json(exclude_none=True).encode()
    return json.dumps(message, separators=(",", ":")).encode()
