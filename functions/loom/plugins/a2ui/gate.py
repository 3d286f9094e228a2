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

The application side lives in :mod:`loom.plugins.a2ui.replies`, the records both sides share
in :mod:`loom.plugins.a2ui.sent_calls`; their names are re-exported here.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from loom.app import EffectDef, FlowContext, Loom, Retry
from loom.errors import ConfigurationError
from loom.kernel.context import EffectContext
from loom.kernel.fold import ExecutionState
from loom.plugins.a2ui.bridge import A2UISurfaceBridge
from loom.plugins.a2ui.capabilities import RendererCapabilities
from loom.plugins.a2ui.catalog import A2UICatalog
from loom.plugins.a2ui.errors import ClientFunctionError
from loom.plugins.a2ui.protocol import CallRendererFunctionMessage
from loom.plugins.a2ui.replies import admit_reply, deliver_function_response, pending_function_calls
from loom.plugins.a2ui.sent_calls import (
    A2UI_FUNCTION_RESULT,
    SEND_EFFECT,
    SendCallFunction,
    SentCall,
    as_reply,
    gate_call_id,
)

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime

# The application side and the shared records live in ``loom.plugins.a2ui.replies`` and
# ``loom.plugins.a2ui.sent_calls``; importing them from here goes on working.
__all__ = [
    "A2UI_FUNCTION_RESULT",
    "SEND_EFFECT",
    "A2UIMessageSender",
    "SendCallFunction",
    "SentCall",
    "admit_reply",
    "deliver_function_response",
    "gate_call_id",
    "pending_function_calls",
    "register_a2ui_sender",
    "request_client_function",
    "result_of",
]


class A2UIMessageSender(abc.ABC):
    """Delivers agent→renderer messages to a surface's renderer (SSE, a queue, a push)."""

    @abc.abstractmethod
    async def send(
        self, execution_id: str, surface_id: str, message: CallRendererFunctionMessage
    ) -> None:
        """Deliver ``message`` to ``surface_id``'s renderer (possibly again: same call id)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


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


def result_of(sent: SentCall, payload: Any, catalog: A2UICatalog | None) -> Any:
    """Check a resume payload against the call it answers and return its result.

    On replay the same recorded payload gives the same answer.
    """
    reply = as_reply(sent.functionCallId, payload)
    if reply.error is not None:
        raise ClientFunctionError(
            f"renderer function {sent.name!r} (call {sent.functionCallId!r}) failed: "
            f"{reply.error.code}: {reply.error.message}",
            details={"functionCallId": sent.functionCallId, "error": reply.error.to_wire()},
        )
    return catalog.validate_result(sent.name, reply.value) if catalog else reply.value
