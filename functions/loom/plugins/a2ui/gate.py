"""Grain A: a client function as a gate — send the request, suspend, resume with the reply.

Flow side, :func:`request_client_function`::

    send = register_a2ui_sender(app, sender)           # once, at app set-up

    @app.flow("profile.locale")
    async def locale(ctx: FlowContext, surface: str) -> str:
        return await request_client_function(ctx, send, surface, "getLocale", catalog=CATALOG)

The request goes out through the idempotent effect ``a2ui.send`` (recorded once, so a replay
does not send it again; a crash before it was recorded sends it again with the same call id).
The flow then waits on ``ctx.suspend(on="A2UIFunctionResult", correlation_key=callId)``.

Application side, :func:`deliver_function_response`: authenticate the request (when an
authenticator is configured), check the reply answers a call this execution issued and still
awaits, validate the result against the catalog, and ``runtime.resume`` the gate. The reply
is then a recorded fact; replay serves it from the log and never contacts the client.

Call ids are call-site-unique: by default ``{execution_id}:{name}#{step}`` from the send
step's position, and an id derived only from the function name (``getLocale`` or
``{execution_id}:getLocale``) gets the same ``#{step}`` suffix, so two calls of one function
in one execution can never take each other's replies.
"""

from __future__ import annotations

import abc
import asyncio
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loom.app import EffectDef, Loom, Retry
from loom.context import EffectContext, FlowContext
from loom.fold import resume_key
from loom.plugins.a2ui.auth import ResumeAuthenticator
from loom.plugins.a2ui.bridge import A2UISurfaceBridge
from loom.plugins.a2ui.catalog import A2UICatalog
from loom.plugins.a2ui.errors import (
    A2UIProtocolError,
    ClientFunctionError,
    CorrelationError,
    ResumeAuthenticationError,
)
from loom.plugins.a2ui.protocol import (
    CallFunctionMessage,
    CallFunctionPayload,
    FunctionResponseMessage,
    FunctionResponsePayload,
    WireInput,
    is_function_response,
    parse_client_message,
)

if TYPE_CHECKING:
    from loom.runtime import Runtime
    from loom.wire import ExecutionResult

A2UI_FUNCTION_RESULT = "A2UIFunctionResult"
"""The ``on`` of every grain-A gate."""

SEND_EFFECT = "a2ui.send"
"""The default name of the effect that sends grain-A requests."""


class A2UIMessageSender(abc.ABC):
    """Delivers server→client messages to a surface's client (SSE, a queue, a push service)."""

    @abc.abstractmethod
    async def send(self, execution_id: str, message: CallFunctionMessage) -> None:
        """Deliver ``message`` (possibly again: same call id, the client answers once)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class SendCallFunction(BaseModel):
    """Input of the send effect: what to ask, and of which surface."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    surfaceId: str = Field(min_length=1)
    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    callId: str | None = None
    callableFrom: str | None = None


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
    app: Loom, sender: A2UIMessageSender, *, name: str = SEND_EFFECT, retry: Retry | None = None
) -> EffectDef:
    """Register the idempotent effect that sends grain-A ``callFunction`` requests.

    Its output is the request as sent (``CallFunctionPayload``), so the log records exactly
    what the client was asked and under which call id.
    """

    async def a2ui_send(ctx: EffectContext, request: SendCallFunction) -> CallFunctionPayload:
        call_id = gate_call_id(ctx.execution_id, ctx.step_id, request.name, request.callId)
        message = A2UISurfaceBridge(request.surfaceId).call_function(
            request.name, request.args, call_id=call_id, callable_from=request.callableFrom
        )
        await sender.send(ctx.execution_id, message)
        return message.callFunction

    policy = retry or Retry(max_attempts=3, initial_interval=0.05)
    return app.effect(name, idempotent=True, retry=policy)(a2ui_send)


async def request_client_function(
    ctx: FlowContext,
    send: EffectDef,
    surface_id: str,
    name: str,
    args: Mapping[str, Any] | None = None,
    *,
    call_id: str | None = None,
    callable_from: str | None = None,
    timeout: timedelta | float | None = None,
    catalog: A2UICatalog | None = None,
) -> Any:
    """Ask the client of ``surface_id`` to run ``name`` and wait (durably) for its result.

    Args:
        ctx: The flow's context.
        send: The effect from :func:`register_a2ui_sender`.
        surface_id: The surface whose client runs the function.
        name: The catalog function.
        args: Its arguments (checked against the catalog first, when one is given).
        call_id: A call-site-unique id; by default one is derived from the send step.
        callable_from: Passed through as ``callableFrom``.
        timeout: How long the gate waits; then :class:`~loom.errors.GateTimeoutError`.
        catalog: Validates the arguments and the result.

    Returns:
        The client's result (validated against the catalog's ``returns``, when given).

    Raises:
        CatalogValidationError: Arguments or result fail the catalog.
        ClientFunctionError: The client answered with an error.
        CorrelationError: The resume payload answers another surface, call or function.
        GateTimeoutError: No reply within ``timeout``.
    """
    if catalog is not None:
        args = catalog.validate_args(name, args)
    request = SendCallFunction(
        surfaceId=surface_id,
        name=name,
        args=dict(args or {}) or None,
        callId=call_id,
        callableFrom=callable_from,
    )
    sent: CallFunctionPayload = await ctx.execute(send, request)
    payload = await ctx.suspend(
        on=A2UI_FUNCTION_RESULT, correlation_key=sent.callId, timeout=timeout
    )
    return result_of(sent, payload, catalog)


def result_of(sent: CallFunctionPayload, payload: Any, catalog: A2UICatalog | None) -> Any:
    """Check a resume payload against the request it answers and return its result.

    The gate may have been resumed by any path (a generic resume endpoint too), so the flow
    checks the reply itself; on replay the same recorded payload gives the same answer.
    """
    try:
        reply = FunctionResponsePayload.model_validate(payload)
    except ValidationError as exc:
        raise A2UIProtocolError(
            f"resume payload for call {sent.callId!r} is not a "
            f"functionResponse: {exc.errors()[0]['msg']}"
        ) from None
    bridge = A2UISurfaceBridge(sent.surfaceId)
    bridge.ingest_function_response(
        FunctionResponseMessage(functionResponse=reply), sent.callId, expected_name=sent.name
    )
    if reply.error is not None:
        raise ClientFunctionError(
            f"client function {sent.name!r} (call {sent.callId!r}) failed: "
            f"{reply.error.code}: {reply.error.message}",
            details={"callId": sent.callId, "error": reply.error.to_wire()},
        )
    return catalog.validate_result(sent.name, reply.result) if catalog else reply.result


# -- application side ------------------------------------------------------------------------


async def pending_function_calls(
    runtime: Runtime, execution_id: str, *, send_effect: str = SEND_EFFECT
) -> tuple[dict[str, CallFunctionPayload], set[str]]:
    """The grain-A calls of an execution, by call id: ``(awaiting a reply, answered)``.

    Read from the folded state (snapshot + tail), not the whole log. A call awaits a reply
    once its send step is recorded and until a resume for its call id is (a reply, or the
    gate's timeout).
    """
    state = await runtime.load_state(execution_id)
    pending: dict[str, CallFunctionPayload] = {}
    answered: set[str] = set()
    for rec in state.steps.values():
        if rec.get("effect") != send_effect or rec.get("status") != "completed":
            continue
        output = await runtime.payloads.decode(rec.get("output"), execution_id)
        sent = CallFunctionPayload.model_validate(output)
        if resume_key(A2UI_FUNCTION_RESULT, sent.callId) in state.resumes:
            answered.add(sent.callId)
        else:
            pending[sent.callId] = sent
    return pending, answered


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
    """Resume a grain-A gate with a client's ``functionResponse``, after checking it.

    Args:
        runtime: The runtime of the execution.
        execution_id: The execution that issued the call.
        message: The request body as received (bytes or text, so an authenticator can check
            the exact bytes), or a decoded message.
        headers: The request's headers, for the authenticator.
        authenticate: Admits or refuses the request; refused → nothing is resumed.
        catalog: Validates the result before it becomes a recorded fact.
        send_effect: The name the send effect was registered under.
        grace: Seconds to wait for the log to record a send the client already answered
            (the reply can overtake the send effect's completion record).

    Raises:
        ResumeAuthenticationError: The authenticator refused the request.
        A2UIProtocolError: Not a ``functionResponse``.
        CorrelationError: Not a reply to a call this execution awaits (unsolicited, forged,
            late, for another surface or function).
        CatalogValidationError: The result fails the catalog.
    """
    if authenticate is not None and not authenticate(dict(headers or {}), _body_bytes(message)):
        raise ResumeAuthenticationError(
            f"functionResponse for execution {execution_id!r} refused by the authenticator"
        )
    parsed = parse_client_message(message)
    if not is_function_response(parsed):
        raise A2UIProtocolError("expected a functionResponse")
    call_id = parsed.functionResponse.callId
    request = await _awaited_call(runtime, execution_id, call_id, send_effect, grace)
    reply = A2UISurfaceBridge(request.surfaceId).ingest_function_response(
        parsed, request.callId, expected_name=request.name
    )
    if catalog is not None and reply.error is None:
        catalog.validate_result(reply.name, reply.result)
    return await runtime.resume(execution_id, A2UI_FUNCTION_RESULT, call_id, reply.to_wire())


async def _awaited_call(
    runtime: Runtime, execution_id: str, call_id: str, send_effect: str, grace: float
) -> CallFunctionPayload:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while True:
        pending, answered = await pending_function_calls(
            runtime, execution_id, send_effect=send_effect
        )
        if call_id in pending:
            return pending[call_id]
        if call_id in answered:
            raise CorrelationError(
                f"call {call_id!r} of execution {execution_id!r} was already answered or "
                "timed out; late reply refused",
                details={"callId": call_id, "reason": "late"},
            )
        if loop.time() >= deadline:
            raise CorrelationError(
                f"execution {execution_id!r} issued no call {call_id!r}; unsolicited reply refused",
                details={"callId": call_id, "reason": "unsolicited"},
            )
        await asyncio.sleep(0.02)


def _body_bytes(message: WireInput) -> bytes:
    if isinstance(message, bytes):
        return message
    if isinstance(message, str):
        return message.encode()
    if isinstance(message, BaseModel):
        return message.model_dump_json(exclude_none=True).encode()
    return json.dumps(message, separators=(",", ":")).encode()
