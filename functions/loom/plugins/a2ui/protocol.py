"""A2UI v1.0 wire messages as pydantic models, field names exactly as on the wire.

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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeGuard, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from loom.plugins.a2ui.errors import A2UIProtocolError

A2UI_VERSION = "v1.0"
"""The protocol version Loom speaks: stamped on what it sends, required on what it receives."""

CallerRole = Literal["rendererOnly", "agentOnly", "rendererOrAgent"]
"""Who may call a catalog function (the catalog's ``allowedCallers``)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able wire form (absent optional fields are left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_json(self) -> str:
        """The wire form as compact JSON text."""
        return json.dumps(self.to_wire(), separators=(",", ":"), ensure_ascii=False)


class _Open(_Model):
    # Renderer payloads the official schema leaves open: keep nothing we do not model.
    model_config = ConfigDict(frozen=True, extra="ignore")


# -- agent → renderer ------------------------------------------------------------------------


class CreateSurfacePayload(_Model):
    """Create a surface on the renderer; ``catalogId`` names its default catalog."""

    surfaceId: str = Field(min_length=1)
    catalogId: str = Field(min_length=1)
    sendDataModel: bool | None = None
    components: list[dict[str, Any]] | None = Field(default=None, min_length=1)
    dataModel: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class UpdateComponentsPayload(_Model):
    """Add or update components of a surface (at least one)."""

    surfaceId: str = Field(min_length=1)
    components: list[dict[str, Any]] = Field(min_length=1)


class UpdateDataModelPayload(_Model):
    """Insert, replace or (with a null ``value``) delete data in a surface's data model."""

    surfaceId: str = Field(min_length=1)
    path: str | None = None
    value: Any

    def to_wire(self) -> dict[str, Any]:
        """``value`` stays on the wire even when null: null means "delete"."""
        return {**super().to_wire(), "value": self.value}


class DeleteSurfacePayload(_Model):
    """Remove a surface and its contents."""

    surfaceId: str = Field(min_length=1)


class FunctionCall(_Model):
    """Which catalog function to run, with what arguments, from which catalog."""

    call: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    catalogId: str = Field(min_length=1)


class CallRendererFunctionPayload(_Model):
    """Ask the renderer to run ``callFunction`` and answer with ``functionCallId``.

    Attributes:
        functionCallId: The caller's deterministic correlation key (never random): the
            answer carries it back, and a side-effecting renderer function dedups on it.
        callFunction: The function, its arguments and its catalog.
    """

    functionCallId: str = Field(min_length=1, max_length=1024)
    callFunction: FunctionCall


class _Envelope(_Model):
    version: Literal["v1.0"] = A2UI_VERSION


class CreateSurfaceMessage(_Envelope):
    """``{"createSurface": ...}``."""

    createSurface: CreateSurfacePayload


class UpdateComponentsMessage(_Envelope):
    """``{"updateComponents": ...}``."""

    updateComponents: UpdateComponentsPayload

    def to_wire(self) -> dict[str, Any]:
        """The wire form."""
        return {"version": self.version, "updateComponents": self.updateComponents.to_wire()}


class UpdateDataModelMessage(_Envelope):
    """``{"updateDataModel": ...}``."""

    updateDataModel: UpdateDataModelPayload

    def to_wire(self) -> dict[str, Any]:
        """The wire form (a null ``value`` kept)."""
        return {"version": self.version, "updateDataModel": self.updateDataModel.to_wire()}


class DeleteSurfaceMessage(_Envelope):
    """``{"deleteSurface": ...}``."""

    deleteSurface: DeleteSurfacePayload


class CallRendererFunctionMessage(_Envelope):
    """``{"callRendererFunction": ...}``: the request half of the agent-initiated RPC."""

    callRendererFunction: CallRendererFunctionPayload


# -- renderer → agent ------------------------------------------------------------------------


class FunctionResponseError(_Model):
    """The error half of a function response: the call was refused, or ran and failed."""

    code: str = Field(min_length=1)
    message: str


class FunctionResponse(_Model):
    """The renderer's answer to ``callRendererFunction``: ``value`` or ``error``, never both.

    ``value`` may be null (the function returned nothing) but must be present when there is
    no ``error``: the wire keeps ``"value": null``.
    """

    functionCallId: str = Field(min_length=1, max_length=1024)
    value: Any = None
    error: FunctionResponseError | None = None

    @model_validator(mode="after")
    def _one_outcome(self) -> FunctionResponse:
        has_value = "value" in self.model_fields_set
        if has_value == (self.error is not None):
            raise ValueError("a function response carries exactly one of value or error")
        return self

    def to_wire(self) -> dict[str, Any]:
        """``{"functionCallId", "value"}`` or ``{"functionCallId", "error"}``."""
        if self.error is not None:
            return {"functionCallId": self.functionCallId, "error": self.error.to_wire()}
        return {"functionCallId": self.functionCallId, "value": self.value}


class ActionPayload(_Open):
    """A user interaction on a surface (a button press, a submitted form)."""

    name: str = Field(min_length=1)
    surfaceId: str = Field(min_length=1)
    sourceComponentId: str = Field(min_length=1)
    timestamp: str = Field(min_length=1)
    context: dict[str, Any]
    userMessage: str | None = None


class RendererErrorPayload(_Open):
    """The renderer reports an error about a surface, or about one function call.

    As the official schema says: a validation error (``VALIDATION_FAILED``,
    ``UNALLOWED_PARENT``, ``UNALLOWED_CHILD``) names a surface and a path; any other error
    names exactly one of a surface or a ``functionCallId``.
    """

    code: str = Field(min_length=1)
    message: str
    surfaceId: str | None = None
    functionCallId: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _addressed(self) -> RendererErrorPayload:
        if self.code in _VALIDATION_CODES:
            if self.surfaceId is None or self.path is None or self.functionCallId is not None:
                raise ValueError(f"a {self.code} error names a surfaceId and a path")
        elif (self.surfaceId is None) == (self.functionCallId is None):
            raise ValueError("an error names exactly one of surfaceId or functionCallId")
        return self


_VALIDATION_CODES = frozenset({"VALIDATION_FAILED", "UNALLOWED_PARENT", "UNALLOWED_CHILD"})


class RendererFunctionResponseMessage(_Envelope):
    """``{"rendererFunctionResponse": ...}``: the response half of the agent-initiated RPC."""

    rendererFunctionResponse: FunctionResponse

    def to_wire(self) -> dict[str, Any]:
        """The wire form (``value`` kept even when null)."""
        return {
            "version": self.version,
            "rendererFunctionResponse": self.rendererFunctionResponse.to_wire(),
        }


class ActionMessage(_Envelope):
    """``{"action": ...}``."""

    action: ActionPayload


class ErrorMessage(_Envelope):
    """``{"error": ...}``; one naming a ``functionCallId`` answers that call."""

    error: RendererErrorPayload


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
