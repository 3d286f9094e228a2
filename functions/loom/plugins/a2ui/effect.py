"""Grain B: a client function as a delegated, non-idempotent effect over a duplex transport.

::

    call_fn = register_a2ui_call_function(app, transport, request_timeout=30, catalog=CATALOG)

    @app.flow("checkout.submit")
    async def submit(ctx: FlowContext, cart: Cart) -> Receipt:
        result = await call_client_function(ctx, call_fn, cart.surface, "confirmAndSubmit",
                                            {"total": cart.total}, catalog=CATALOG)

The effect ``a2ui.callFunction`` sends ``callFunction`` with ``callId = ctx.idempotency_key``
(``{execution_id}:{step_id}``: unique per ``ctx.execute`` by construction) and returns the
client's result, which becomes the step's ``EffectCompleted`` output. It is registered
``idempotent=False``: its intent record is durable before the client is asked, so a crash
mid-call parks the step in doubt for an operator verdict instead of asking the client again.
A retry or a recovery may deliver the same request twice, always with the same call id: a
side-effecting client function must dedup on it.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loom.app import EffectDef, Loom, Retry
from loom.context import EffectContext, FlowContext
from loom.errors import ConfigurationError
from loom.plugins.a2ui.bridge import A2UISurfaceBridge
from loom.plugins.a2ui.catalog import A2UICatalog
from loom.plugins.a2ui.errors import (
    A2UIProtocolError,
    A2UITimeoutError,
    CatalogValidationError,
    ClientFunctionError,
    CorrelationError,
)
from loom.plugins.a2ui.protocol import CallFunctionMessage, WireInput

CALL_FUNCTION_EFFECT = "a2ui.callFunction"
"""The default name of the grain-B effect."""

# Answers that another attempt cannot change: the client said no, or said something wrong.
_FINAL = (A2UIProtocolError, CorrelationError, CatalogValidationError, ClientFunctionError)


class A2UICallFunctionTransport(abc.ABC):
    """A duplex channel to clients: deliver a ``callFunction``, return the client's reply."""

    @abc.abstractmethod
    async def call(self, message: CallFunctionMessage) -> WireInput:
        """Deliver ``message`` to its surface's client and return the client's reply.

        The reply is checked by the caller (call id, surface, function), so a transport may
        return whatever arrived. The call may be cancelled (request timeout); it may be made
        again with the same call id (a retry, a recovery), and should then deliver again.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class CallFunctionRequest(BaseModel):
    """Input of the grain-B effect: which client function to run, on which surface."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    surfaceId: str = Field(min_length=1)
    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    callableFrom: str | None = None


def _seconds(value: float | timedelta) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise ConfigurationError(f"request_timeout must be positive, got {seconds:g}s")
    return seconds


def register_a2ui_call_function(
    app: Loom,
    transport: A2UICallFunctionTransport,
    request_timeout: float | timedelta = 30.0,
    *,
    catalog: A2UICatalog | None = None,
    retry: Retry | None = None,
    requires: Iterable[str] = (),
    name: str = CALL_FUNCTION_EFFECT,
) -> EffectDef:
    """Register the non-idempotent effect that runs a client function over ``transport``.

    Args:
        app: The app to register on.
        transport: Delivers requests and brings back replies.
        request_timeout: Bound on one attempt; the transport call is cancelled and the
            attempt fails with :class:`A2UITimeoutError` (a step with no retries left fails).
        catalog: Validates arguments before the request and the result before it is recorded.
        retry: Retry policy (default: one attempt). Correlation, protocol, catalog and
            client errors are never retried.
        requires: Capabilities an execution needs to call client functions.
        name: The effect's name.

    Returns:
        The effect, for ``ctx.execute`` or :func:`call_client_function`.
    """
    timeout = _seconds(request_timeout)
    policy = retry or Retry(max_attempts=1)
    policy = replace(policy, non_retryable=(*policy.non_retryable, *_FINAL))

    async def a2ui_call_function(ctx: EffectContext, request: CallFunctionRequest) -> Any:
        return await _call(transport, timeout, catalog, ctx, request)

    return app.effect(name, idempotent=False, retry=policy, requires=requires)(a2ui_call_function)


async def _call(
    transport: A2UICallFunctionTransport,
    limit: float,
    catalog: A2UICatalog | None,
    ctx: EffectContext,
    request: CallFunctionRequest,
) -> Any:
    args = catalog.validate_args(request.name, request.args) if catalog else request.args
    bridge = A2UISurfaceBridge(request.surfaceId)
    message = bridge.call_function(
        request.name, args, call_id=ctx.idempotency_key, callable_from=request.callableFrom
    )
    raw = await _bounded(transport.call(message), limit, ctx, message)
    reply = bridge.ingest_function_response(raw, ctx.idempotency_key, expected_name=request.name)
    if reply.error is not None:
        raise ClientFunctionError(
            f"client function {request.name!r} (call {reply.callId!r}) failed: "
            f"{reply.error.code}: {reply.error.message}",
            details={"callId": reply.callId, "error": reply.error.to_wire()},
        )
    return catalog.validate_result(request.name, reply.result) if catalog else reply.result


async def _bounded(
    call: Any, limit: float, ctx: EffectContext, message: CallFunctionMessage
) -> WireInput:
    """Race the transport against ``limit`` seconds; past it, cancel it and say so."""
    try:
        async with asyncio.timeout(limit):
            return await call
    except TimeoutError:
        ctx.cancel()
        payload = message.callFunction
        raise A2UITimeoutError(
            f"client of surface {payload.surfaceId!r} did not answer {payload.name!r} "
            f"(call {payload.callId!r}) within {limit:g}s",
            details={"callId": payload.callId, "timeout_s": limit},
        ) from None


async def call_client_function(
    ctx: FlowContext,
    effect: EffectDef,
    surface_id: str,
    name: str,
    args: Mapping[str, Any] | None = None,
    *,
    callable_from: str | None = None,
    catalog: A2UICatalog | None = None,
) -> Any:
    """Run a client function as a step and return its (validated) result.

    The result is validated here as well as in the effect: a step resolved by an operator
    verdict records the operator's output, which the effect never saw.

    Raises:
        CatalogValidationError: Arguments or result fail the catalog.
        EffectFailedError: The step failed (timeout, client error, refused reply).
    """
    if catalog is not None:
        args = catalog.validate_args(name, args)
    request = CallFunctionRequest(
        surfaceId=surface_id,
        name=name,
        args=dict(args) if args is not None else None,
        callableFrom=callable_from,
    )
    result = await ctx.execute(effect, request)
    return catalog.validate_result(name, result) if catalog else result
