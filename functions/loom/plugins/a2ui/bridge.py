"""``A2UISurfaceBridge``: one surface's end of the protocol, with no clock, randomness or I/O.

The bridge builds ``callFunction`` requests stamped with its surface id and the caller's
deterministic ``callId``, and turns a client's message into a normalized payload after
checking it belongs here. It appends no Loom event and sends nothing: what a reply becomes
(a resume payload, an effect output) is the caller's choice, which keeps the bridge usable
inside flow code, effects and HTTP handlers alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loom.plugins.a2ui.errors import A2UIProtocolError, CorrelationError
from loom.plugins.a2ui.protocol import (
    A2UI_VERSION,
    ActionPayload,
    CallFunctionMessage,
    CallFunctionPayload,
    FunctionResponsePayload,
    WireInput,
    is_action,
    is_function_response,
    parse_client_message,
)


class A2UISurfaceBridge:
    """Builds requests for, and checks replies from, the surface ``surface_id``.

    Args:
        surface_id: The surface every request is stamped with and every reply must name.
        version: The protocol version stamped on messages.
    """

    def __init__(self, surface_id: str, *, version: str = A2UI_VERSION) -> None:
        if not surface_id:
            raise A2UIProtocolError("a surface bridge needs a non-empty surface id")
        self.surface_id = surface_id
        self.version = version

    def call_function(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        call_id: str,
        callable_from: str | None = None,
    ) -> CallFunctionMessage:
        """A ``callFunction`` request for this surface.

        Args:
            name: The catalog function to run on the client.
            args: Its arguments.
            call_id: The deterministic correlation key (e.g. ``ctx.idempotency_key`` or
                ``f"{execution_id}:getLocale#1"``); the bridge never makes one up.
            callable_from: Passed through to the client as ``callableFrom``.

        Raises:
            A2UIProtocolError: An empty name or call id.
        """
        if not call_id:
            raise A2UIProtocolError("callFunction needs the caller's call id; none was given")
        if not name:
            raise A2UIProtocolError("callFunction needs a function name")
        payload = CallFunctionPayload(
            surfaceId=self.surface_id,
            callId=call_id,
            name=name,
            args=dict(args) if args is not None else None,
            callableFrom=callable_from,
        )
        return CallFunctionMessage(version=self.version, callFunction=payload)

    def ingest_function_response(
        self,
        message: WireInput,
        expected_call_id: str | None = None,
        *,
        expected_name: str | None = None,
    ) -> FunctionResponsePayload:
        """Normalize a client's ``functionResponse`` for this surface.

        Without ``expected_call_id`` only the surface is checked, so a reply nobody asked for
        would pass: give it whenever the reply may resume a gate or complete a step.

        Args:
            message: The client's message (JSON text, a decoded object or a parsed model).
            expected_call_id: The call id that was issued; any other is refused.
            expected_name: The function that was called; any other is refused.

        Raises:
            A2UIProtocolError: Not a ``functionResponse``, or malformed.
            CorrelationError: A reply for another surface, call or function.
        """
        parsed = parse_client_message(message)
        if not is_function_response(parsed):
            raise A2UIProtocolError(
                f"expected a functionResponse, got {_kind_of(parsed.to_wire())}"
            )
        reply = parsed.functionResponse
        self._check_surface(reply.surfaceId, "functionResponse")
        if expected_call_id is not None and reply.callId != expected_call_id:
            raise CorrelationError(
                f"functionResponse answers call {reply.callId!r}, expected {expected_call_id!r}",
                details={"callId": reply.callId, "expected": expected_call_id},
            )
        if expected_name is not None and reply.name != expected_name:
            raise CorrelationError(
                f"functionResponse for call {reply.callId!r} names function {reply.name!r}, "
                f"the call was to {expected_name!r}",
                details={"name": reply.name, "expected": expected_name},
            )
        return reply

    def ingest_action(self, message: WireInput) -> ActionPayload:
        """Normalize a client's ``action`` for this surface.

        Raises:
            A2UIProtocolError: Not an ``action``, or malformed.
            CorrelationError: An action on another surface.
        """
        parsed = parse_client_message(message)
        if not is_action(parsed):
            raise A2UIProtocolError(f"expected an action, got {_kind_of(parsed.to_wire())}")
        self._check_surface(parsed.action.surfaceId, "action")
        return parsed.action

    def _check_surface(self, surface_id: str, what: str) -> None:
        if surface_id != self.surface_id:
            raise CorrelationError(
                f"{what} is for surface {surface_id!r}, this bridge serves {self.surface_id!r}",
                details={"surfaceId": surface_id, "expected": self.surface_id},
            )


def _kind_of(wire: dict[str, Any]) -> str:
    keys = [k for k in wire if k != "version"]
    return keys[0] if keys else "an empty message"
