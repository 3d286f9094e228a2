"""``A2UISurfaceBridge``: one surface's end of the protocol, with no clock, randomness or I/O.

The bridge builds the messages Loom sends to one surface's renderer — ``createSurface``
stamped with the catalog id, ``callRendererFunction`` stamped with the catalog id and the
caller's deterministic ``functionCallId`` — and turns a renderer's message into a normalized
payload after checking it answers what was asked. It appends no Loom event and sends
nothing: what a reply becomes (a resume payload, an effect output) is the caller's choice,
which keeps the bridge usable inside flow code, effects and HTTP handlers alike.

Official replies carry neither the surface nor the function name: a reply is matched on its
``functionCallId`` alone, and the surface and function come from Loom's own record of the
call it sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loom.plugins.a2ui.errors import A2UIProtocolError, CorrelationError
from loom.plugins.a2ui.protocol import (
    ActionPayload,
    CallRendererFunctionMessage,
    CallRendererFunctionPayload,
    CreateSurfaceMessage,
    CreateSurfacePayload,
    FunctionCall,
    FunctionResponse,
    WireInput,
    is_action,
    parse_function_outcome,
    parse_renderer_message,
)


class A2UISurfaceBridge:
    """Builds requests for, and checks replies from, the surface ``surface_id``.

    Args:
        surface_id: The surface requests are meant for and actions must name.
        catalog_id: The surface's default catalog, stamped on calls that name no other.
    """

    def __init__(self, surface_id: str, *, catalog_id: str) -> None:
        if not surface_id:
            raise A2UIProtocolError("a surface bridge needs a non-empty surface id")
        if not catalog_id:
            raise A2UIProtocolError("a surface bridge needs the surface's catalogId")
        self.surface_id = surface_id
        self.catalog_id = catalog_id

    def create_surface(self, **fields: Any) -> CreateSurfaceMessage:
        """A ``createSurface`` for this surface and catalog (more fields as keywords)."""
        return CreateSurfaceMessage(
            createSurface=CreateSurfacePayload(
                surfaceId=self.surface_id, catalogId=self.catalog_id, **fields
            )
        )

    def call_function(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        call_id: str,
        catalog_id: str | None = None,
    ) -> CallRendererFunctionMessage:
        """A ``callRendererFunction`` request.

        Args:
            name: The catalog function to run on the renderer.
            args: Its arguments.
            call_id: The deterministic correlation key (e.g. ``ctx.idempotency_key`` or
                ``f"{execution_id}:getLocale#1"``); the bridge never makes one up.
            catalog_id: The function's catalog, if not the surface's default.

        Raises:
            A2UIProtocolError: An empty name or call id.
        """
        if not call_id:
            raise A2UIProtocolError("callRendererFunction needs the caller's call id")
        if not name:
            raise A2UIProtocolError("callRendererFunction needs a function name")
        call = FunctionCall(
            call=name,
            args=dict(args) if args is not None else None,
            catalogId=catalog_id or self.catalog_id,
        )
        return CallRendererFunctionMessage(
            callRendererFunction=CallRendererFunctionPayload(
                functionCallId=call_id, callFunction=call
            )
        )

    @staticmethod
    def ingest_function_response(message: WireInput, expected_call_id: str) -> FunctionResponse:
        """Normalize a renderer's answer to the call ``expected_call_id``.

        Takes a ``rendererFunctionResponse``, or an ``error`` naming the call's
        ``functionCallId`` (how a renderer reports a call it refused).

        Raises:
            A2UIProtocolError: Another version, malformed, or not an answer to a call.
            CorrelationError: An answer to another call.
        """
        reply = parse_function_outcome(message)
        if reply.functionCallId != expected_call_id:
            raise CorrelationError(
                f"reply answers call {reply.functionCallId!r}, expected {expected_call_id!r}",
                details={"functionCallId": reply.functionCallId, "expected": expected_call_id},
            )
        return reply

    def ingest_action(self, message: WireInput) -> ActionPayload:
        """Normalize a renderer's ``action`` for this surface.

        Raises:
            A2UIProtocolError: Another version, not an ``action``, or malformed.
            CorrelationError: An action on another surface.
        """
        parsed = parse_renderer_message(message)
        if not is_action(parsed):
            raise A2UIProtocolError("expected an action")
        if parsed.action.surfaceId != self.surface_id:
            raise CorrelationError(
                f"action is for surface {parsed.action.surfaceId!r}, this bridge serves "
                f"{self.surface_id!r}",
                details={"surfaceId": parsed.action.surfaceId, "expected": self.surface_id},
            )
        return parsed.action
