"""What a grain-A gate and its replies share: the gate's names, the calls Loom records sending.

The flow side (:mod:`loom.plugins.a2ui.gate`) records a :class:`SentCall` when it sends a
request; the application side (:mod:`loom.plugins.a2ui.replies`) matches each reply against
it. Both check a reply's shape the same way, with :func:`as_reply`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loom.plugins.a2ui.errors import A2UIProtocolError, CorrelationError
from loom.plugins.a2ui.protocol import FunctionResponse

A2UI_FUNCTION_RESULT = "A2UIFunctionResult"
"""The ``on`` of every grain-A gate."""

SEND_EFFECT = "a2ui.send"
"""The default name of the effect that sends grain-A requests."""


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


def as_reply(sent_call_id: str, payload: Any) -> FunctionResponse:
    """``payload`` as the function response answering call ``sent_call_id``.

    Raises:
        A2UIProtocolError: The payload is not a function response.
        CorrelationError: It answers another call.
    """
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
