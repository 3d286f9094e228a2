"""The A2UI v1.0 wire protocol: its messages, and the parsing of what a peer sends.

Every message is an envelope ``{"version": "v1.0", "<kind>": {...payload...}}`` with one
message key. Agent→renderer kinds Loom emits: ``createSurface``, ``updateComponents``,
``updateDataModel``, ``deleteSurface`` and ``callRendererFunction`` (ask the renderer to run a
catalog function). Renderer→agent kinds Loom accepts: ``action`` (a user interaction),
``error`` and ``rendererFunctionResponse`` (the answer to a ``callRendererFunction``).

The ``version`` of everything received is checked: a message of another protocol version is
refused, never guessed at. Field names are camelCase because they *are* the wire:
``model.to_wire()`` is the JSON a peer sends. What Loom accepts, the official v1.0 JSON Schema
accepts too: a function response with a field the schema does not define is refused, not
trimmed; the payloads the schema leaves open (an ``action``'s, a generic ``error``'s) are
normalized to the fields this plugin models before anything is recorded.

The message models live in :mod:`loom.plugins.a2ui.messages` (re-exported here); this module
holds what recognises a received message: the unions, the parsers and the classifiers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, TypeGuard, cast

from pydantic import BaseModel, Discriminator, Tag, TypeAdapter, ValidationError

from loom.plugins.a2ui.errors import A2UIProtocolError
from loom.plugins.a2ui.messages import (
    A2UI_VERSION,
    ActionMessage,
    ActionPayload,
    CallerRole,
    CallRendererFunctionMessage,
    CallRendererFunctionPayload,
    CreateSurfaceMessage,
    CreateSurfacePayload,
    DeleteSurfaceMessage,
    DeleteSurfacePayload,
    ErrorMessage,
    FunctionCall,
    FunctionResponse,
    FunctionResponseError,
    RendererErrorPayload,
    RendererFunctionResponseMessage,
    UpdateComponentsMessage,
    UpdateComponentsPayload,
    UpdateDataModelMessage,
    UpdateDataModelPayload,
)

# The message models live in ``loom.plugins.a2ui.messages``; importing them from here goes on
# working.
__all__ = [
    "A2UI_VERSION",
    "ActionMessage",
    "ActionPayload",
    "AgentToRendererMessage",
    "CallRendererFunctionMessage",
    "CallRendererFunctionPayload",
    "CallerRole",
    "CreateSurfaceMessage",
    "CreateSurfacePayload",
    "DeleteSurfaceMessage",
    "DeleteSurfacePayload",
    "ErrorMessage",
    "FunctionCall",
    "FunctionResponse",
    "FunctionResponseError",
    "RendererErrorPayload",
    "RendererFunctionResponseMessage",
    "RendererToAgentMessage",
    "UpdateComponentsMessage",
    "UpdateComponentsPayload",
    "UpdateDataModelMessage",
    "UpdateDataModelPayload",
    "WireInput",
    "function_outcome",
    "is_action",
    "is_call_renderer_function",
    "is_function_response",
    "parse_agent_message",
    "parse_function_outcome",
    "parse_renderer_message",
]


# -- unions ----------------------------------------------------------------------------------

_AGENT_KINDS = (
    "createSurface",
    "updateComponents",
    "updateDataModel",
    "deleteSurface",
    "callRendererFunction",
)
_RENDERER_KINDS = ("action", "error", "rendererFunctionResponse")


def _kind(kinds: tuple[str, ...]) -> Any:
    def key(value: Any) -> str | None:
        if isinstance(value, BaseModel):
            found = [k for k in kinds if k in type(value).model_fields]
        elif isinstance(value, Mapping):
            found = [k for k in kinds if k in value]
        else:
            return None
        return found[0] if len(found) == 1 else None

    return Discriminator(
        key,
        custom_error_type="a2ui_message_kind",
        custom_error_message=f"expected exactly one message key of {', '.join(kinds)}",
    )


AgentToRendererMessage = Annotated[
    Annotated[CreateSurfaceMessage, Tag("createSurface")]
    | Annotated[UpdateComponentsMessage, Tag("updateComponents")]
    | Annotated[UpdateDataModelMessage, Tag("updateDataModel")]
    | Annotated[DeleteSurfaceMessage, Tag("deleteSurface")]
    | Annotated[CallRendererFunctionMessage, Tag("callRendererFunction")],
    _kind(_AGENT_KINDS),
]
"""Any message an agent (Loom) sends to a renderer."""

RendererToAgentMessage = Annotated[
    Annotated[ActionMessage, Tag("action")]
    | Annotated[ErrorMessage, Tag("error")]
    | Annotated[RendererFunctionResponseMessage, Tag("rendererFunctionResponse")],
    _kind(_RENDERER_KINDS),
]
"""Any message a renderer sends to an agent that Loom understands."""

_AGENT: TypeAdapter[AgentToRendererMessage] = TypeAdapter(AgentToRendererMessage)
_RENDERER: TypeAdapter[RendererToAgentMessage] = TypeAdapter(RendererToAgentMessage)

WireInput = str | bytes | Mapping[str, Any] | BaseModel
"""What the parsers accept: JSON text or bytes, a decoded JSON object, or a model."""


def _decoded(data: WireInput) -> Any:
    if isinstance(data, BaseModel):
        to_wire = getattr(data, "to_wire", None)
        return to_wire() if callable(to_wire) else data.model_dump(mode="json", by_alias=True)
    if isinstance(data, (str, bytes)):
        try:
            return json.loads(data)
        except ValueError as exc:
            raise A2UIProtocolError(f"not JSON: {exc}") from None
    return data


def _check_version(data: Any) -> None:
    if not isinstance(data, Mapping):
        raise A2UIProtocolError("an A2UI message is a JSON object")
    version: Any = cast(Mapping[str, Any], data).get("version")
    if version != A2UI_VERSION:
        raise A2UIProtocolError(
            f"A2UI version {version!r} is not spoken here; messages must say "
            f'"version": "{A2UI_VERSION}"',
            details={"version": version, "expected": A2UI_VERSION},
        )


def _parse(adapter: TypeAdapter[Any], data: WireInput, kinds: tuple[str, ...], side: str) -> Any:
    decoded = _decoded(data)
    _check_version(decoded)
    try:
        return adapter.validate_python(decoded)
    except ValidationError as exc:
        raise A2UIProtocolError(
            f"not a valid A2UI {side} message (expected exactly one of {', '.join(kinds)}): "
            f"{exc.error_count()} error(s), first: {exc.errors()[0]['msg']}",
            details={
                "errors": exc.errors(include_url=False, include_input=False, include_context=False)
            },
        ) from None


def parse_agent_message(data: WireInput) -> AgentToRendererMessage:
    """Parse an agent→renderer message.

    Raises:
        A2UIProtocolError: Malformed JSON, another version, no or several message keys, or a
            bad payload.
    """
    return _parse(_AGENT, data, _AGENT_KINDS, "agent-to-renderer")


def parse_renderer_message(data: WireInput) -> RendererToAgentMessage:
    """Parse a renderer→agent message.

    Raises:
        A2UIProtocolError: Malformed JSON, another version, no or several message keys, or a
            bad payload.
    """
    return _parse(_RENDERER, data, _RENDERER_KINDS, "renderer-to-agent")


def is_action(message: RendererToAgentMessage) -> TypeGuard[ActionMessage]:
    """Whether a parsed renderer message is an ``action``."""
    return isinstance(message, ActionMessage)


def is_function_response(
    message: RendererToAgentMessage,
) -> TypeGuard[RendererFunctionResponseMessage]:
    """Whether a parsed renderer message is a ``rendererFunctionResponse``."""
    return isinstance(message, RendererFunctionResponseMessage)


def is_call_renderer_function(
    message: AgentToRendererMessage,
) -> TypeGuard[CallRendererFunctionMessage]:
    """Whether a parsed agent message is a ``callRendererFunction``."""
    return isinstance(message, CallRendererFunctionMessage)


def function_outcome(message: RendererToAgentMessage) -> FunctionResponse | None:
    """The answer a message gives to a function call, if it gives one.

    A ``rendererFunctionResponse`` answers its call; an ``error`` naming a ``functionCallId``
    answers that call with the error (how renderers report a call they refused).
    """
    if isinstance(message, RendererFunctionResponseMessage):
        return message.rendererFunctionResponse
    if isinstance(message, ErrorMessage) and message.error.functionCallId:
        err = message.error
        return FunctionResponse(
            functionCallId=err.functionCallId,  # type: ignore[arg-type]
            error=FunctionResponseError(code=err.code, message=err.message),
        )
    return None


def parse_function_outcome(data: WireInput) -> FunctionResponse:
    """Parse a renderer message that answers a function call.

    Raises:
        A2UIProtocolError: Malformed, another version, or not an answer to a call.
    """
    parsed = parse_renderer_message(data)
    outcome = function_outcome(parsed)
    if outcome is None:
        kind = next((k for k in _RENDERER_KINDS if k in type(parsed).model_fields), "?")
        raise A2UIProtocolError(
            f"expected a rendererFunctionResponse (or an error naming a functionCallId), got {kind}"
        )
    return outcome
