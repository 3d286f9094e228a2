"""Grain B: a renderer function as a delegated, non-idempotent effect over a duplex transport.

::

    call_fn = register_a2ui_call_function(app, transport, request_timeout=30, catalog=CATALOG)

    @app.flow("checkout.submit")
    async def submit(ctx: FlowContext, cart: Cart) -> Receipt:
        result = await call_client_function(ctx, call_fn, cart.surface, "confirmAndSubmit",
                                            {"total": cart.total}, catalog=CATALOG)

The effect ``a2ui.callFunction`` sends ``callRendererFunction`` with
``functionCallId = ctx.idempotency_key`` (``{execution_id}:{step_id}``: unique per
``ctx.execute`` by construction) and returns the renderer's value, which becomes the step's
``EffectCompleted`` output. It is registered ``idempotent=False``: its intent record is
durable before the renderer is asked, so a crash mid-call parks the step in doubt for an
operator verdict instead of asking again. A retry or a recovery may deliver the same request
twice, always with the same call id: a side-effecting renderer function must dedup on it.

A reply that does not answer the call (another ``functionCallId``, a malformed message)
proves nothing about whether the function ran: the step is parked in doubt
(:class:`~loom.errors.EffectOutcomeUnknownError`), never recorded as a definitive failure.
An answer that *is* the call's — a value, an error, a refusal such as
``INVALID_FUNCTION_CALL`` — is definitive.
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
from loom.errors import ConfigurationError, EffectOutcomeUnknownError
from loom.kernel.context import EffectContext, FlowContext
from loom.plugins.a2ui.bridge import A2UISurfaceBridge
from loom.plugins.a2ui.capabilities import RendererCapabilities
from loom.plugins.a2ui.catalog import A2UICatalog
from loom.plugins.a2ui.errors import (
    A2UIError,
    A2UITimeoutError,
    CatalogValidationError,
    ClientFunctionError,
)
from loom.plugins.a2ui.protocol import CallRendererFunctionMessage, WireInput

CALL_FUNCTION_EFFECT = "a2ui.callFunction"
"""The default name of the grain-B effect."""

# Answers that another attempt cannot change: the renderer said no, or answered wrongly.
_FINAL = (CatalogValidationError, ClientFunctionError)


class A2UICallFunctionTransport(abc.ABC):
    """A duplex channel to renderers: deliver a ``callRendererFunction``, return the reply."""

    @abc.abstractmethod
    async def call(self, surface_id: str, message: CallRendererFunctionMessage) -> WireInput:
        """Deliver ``message`` to ``surface_id``'s renderer and return the renderer's reply.

        The reply is checked by the caller (version, call id), so a transport may return
        whatever arrived. The call may be cancelled (request timeout); it may be made again
        with the same call id (a retry, a recovery), and should then deliver again.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class CallFunctionRequest(BaseModel):
    """Input of the grain-B effect: which renderer function, on which surface and catalog."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    surfaceId: str = Field(min_length=1)
    name: str = Field(min_length=1)
    catalogId: str = Field(min_length=1)
    args: dict[str, Any] | None = None


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
    """Register the non-idempotent effect that runs a renderer function over ``transport``.

    Args:
        app: The app to register on.
        transport: Delivers requests and brings back replies.
        request_timeout: Bound on one attempt; the transport call is cancelled and the
            attempt fails with :class:`A2UITimeoutError` (a step with no retries left fails).
        catalog: Validates arguments before the request and the result before it is recorded.
        retry: Retry policy (default: one attempt). Catalog and renderer errors are never
            retried; a reply that does not answer the call parks the step in doubt.
        requires: Capabilities an execution needs to call renderer functions.
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
    bridge = A2UISurfaceBridge(request.surfaceId, catalog_id=request.catalogId)
    message = bridge.call_function(request.name, args, call_id=ctx.idempotency_key)
    raw = await _bounded(transport.call(request.surfaceId, message), limit, ctx, request)
    try:
        reply = bridge.ingest_function_response(raw, ctx.idempotency_key)
    except A2UIError as exc:
        # Not an answer to this call: whether the function ran is unknown.
        raise EffectOutcomeUnknownError(
            f"renderer of surface {request.surfaceId!r} sent a reply that does not answer "
            f"call {ctx.idempotency_key!r} ({exc.message}); whether {request.name!r} ran is "
            "unknown",
            details={"functionCallId": ctx.idempotency_key},
        ) from exc
    if reply.error is not None:
        raise ClientFunctionError(
            f"renderer function {request.name!r} (call {reply.functionCallId!r}) failed: "
            f"{reply.error.code}: {reply.error.message}",
            details={"functionCallId": reply.functionCallId, "error": reply.error.to_wire()},
        )
    return catalog.validate_result(request.name, reply.value) if catalog else reply.value


async def _bounded(
    call: Any, limit: float, ctx: EffectContext, request: CallFunctionRequest
) -> WireInput:
    """Race the transport against ``limit`` seconds; past it, cancel it and say so."""
    try:
        async with asyncio.timeout(limit):
            return await call
    except TimeoutError:
        ctx.cancel()
        raise A2UITimeoutError(
            f"renderer of surface {request.surfaceId!r} did not answer {request.name!r} "
            f"(call {ctx.idempotency_key!r}) within {limit:g}s",
            details={"functionCallId": ctx.idempotency_key, "timeout_s": limit},
        ) from None


async def call_client_function(
    ctx: FlowContext,
    effect: EffectDef,
    surface_id: str,
    name: str,
    args: Mapping[str, Any] | None = None,
    *,
    catalog: A2UICatalog | None = None,
    catalog_id: str | None = None,
    renderer: RendererCapabilities | None = None,
) -> Any:
    """Run a renderer function as a step and return its (validated) result.

    The result is validated here as well as in the effect: a step resolved by an operator
    verdict records the operator's output, which the effect never saw.

    Raises:
        CatalogValidationError: Not callable by an agent, not advertised by the renderer,
            or arguments or result that fail the catalog.
        EffectFailedError: The step failed (timeout, renderer error or refusal).
    """
    if catalog_id is None and catalog is None:
        raise ConfigurationError("a renderer function call needs catalog= or catalog_id=")
    cid = catalog_id or catalog.catalog_id  # type: ignore[union-attr]
    if catalog is not None:
        args = catalog.callable_by_agent(name).validate_args(args)
    if renderer is not None:
        renderer.check_call(cid, name)
    request = CallFunctionRequest(
        surfaceId=surface_id,
        name=name,
        catalogId=cid,
        args=dict(args) if args is not None else None,
    )
    result = await ctx.execute(effect, request)
    return catalog.validate_result(name, result) if catalog else result
