"""A2UI wire messages as pydantic models, field names exactly as on the wire.

Every message is an envelope ``{"version": "v0.9", "<kind>": {...payload...}}`` with one
message key. Server→client kinds: ``createSurface``, ``updateComponents``, ``updateDataModel``,
``deleteSurface`` and ``callFunction`` (ask the client to run a catalog function).
Client→server kinds: ``action`` (a user interaction), ``error`` and ``functionResponse`` (the
answer to a ``callFunction``).

Field names are camelCase because they *are* the wire: ``model.to_wire()`` is the JSON a
peer sends, and a value recorded in the event log reads the same as the message it came from.
Payloads that carry a client's answer ignore unknown fields: a reply is normalized to what
this plugin understands before anything is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, TypeGuard

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from loom.plugins.a2ui.errors import A2UIProtocolError

A2UI_VERSION = "v0.9"
"""The ``version`` stamped on messages this plugin builds."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able wire form (absent optional fields are left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_json(self) -> str:
        """The wire form as compact JSON text."""
        return json.dumps(self.to_wire(), separators=(",", ":"), ensure_ascii=False)


class _Open(_Model):
    # Rendering payloads carry much more than this plugin needs; keep what we do not model.
    model_config = ConfigDict(frozen=True, extra="allow")


class _Normalized(_Model):
    # Client-controlled input: drop what we do not understand rather than record it.
    model_config = ConfigDict(frozen=True, extra="ignore")


# -- server → client ------------------------------------------------------------------------


class CreateSurfacePayload(_Open):
    """Create a surface on the client and begin rendering it."""

    surfaceId: str = Field(min_length=1)
    catalogId: str | None = None


class UpdateComponentsPayload(_Open):
    """Add or update components of a surface."""

    surfaceId: str = Field(min_length=1)
    components: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])


class UpdateDataModelPayload(_Open):
    """Insert or replace data in a surface's data model."""

    surfaceId: str = Field(min_length=1)
    path: str | None = None
    value: Any = None


class DeleteSurfacePayload(_Open):
    """Remove a surface and its contents."""

    surfaceId: str = Field(min_length=1)


class CallFunctionPayload(_Model):
    """Ask the client to run the catalog function ``name`` and answer with ``callId``.

    Attributes:
        surfaceId: The surface the call belongs to; the answer must name the same one.
        callId: The caller's deterministic correlation key (never random): the answer
            carries it back, and a side-effecting client function dedups on it.
        name: The catalog function to run.
        args: Its arguments (a JSON object).
        callableFrom: Where the call is made from, passed through to the client.
    """

    surfaceId: str = Field(min_length=1)
    callId: str = Field(min_length=1, max_length=512)
    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    callableFrom: str | None = None


class _Envelope(_Model):
    version: str = A2UI_VERSION


class CreateSurfaceMessage(_Envelope):
    """``{"createSurface": ...}``."""

    createSurface: CreateSurfacePayload


class UpdateComponentsMessage(_Envelope):
    """``{"updateComponents": ...}``."""

    updateComponents: UpdateComponentsPayload


class UpdateDataModelMessage(_Envelope):
    """``{"updateDataModel": ...}``."""

    updateDataModel: UpdateDataModelPayload


class DeleteSurfaceMessage(_Envelope):
    """``{"deleteSurface": ...}``."""

    deleteSurface: DeleteSurfacePayload


class CallFunctionMessage(_Envelope):
    """``{"callFunction": ...}``: the request half of the bidirectional RPC."""

    callFunction: CallFunctionPayload


# -- client → server ------------------------------------------------------------------------


class ActionPayload(_Normalized):
    """A user interaction on a surface (a button press, a submitted form)."""

    name: str = Field(min_length=1)
    surfaceId: str = Field(min_length=1)
    sourceComponentId: str = ""
    timestamp: str = ""
    context: dict[str, Any] = Field(default_factory=dict[str, Any])


class ErrorPayload(_Normalized):
    """The client reports an error about a surface."""

    code: str = "error"
    surfaceId: str = ""
    path: str | None = None
    message: str = ""


class FunctionError(_Normalized):
    """The error half of a ``functionResponse``: the function ran and failed."""

    code: str = "error"
    message: str = ""


class FunctionResponsePayload(_Normalized):
    """The client's answer to ``callFunction``: ``result`` or ``error``, never both.

    An absent or null ``result`` means the function returned nothing.
    """

    surfaceId: str = Field(min_length=1)
    callId: str = Field(min_length=1, max_length=512)
    name: str = Field(min_length=1)
    result: Any = None
    error: FunctionError | None = None

    @field_validator("error", mode="before")
    @classmethod
    def _error_text(cls, value: Any) -> Any:
        # Clients commonly answer a bare message; keep it rather than reject the reply.
        return {"message": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_outcome(self) -> FunctionResponsePayload:
        if self.error is not None and self.result is not None:
            raise ValueError("a functionResponse carries result or error, not both")
        return self


class ActionMessage(_Envelope):
    """``{"action": ...}``."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    action: ActionPayload


class ErrorMessage(_Envelope):
    """``{"error": ...}``."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    error: ErrorPayload


class FunctionResponseMessage(_Envelope):
    """``{"functionResponse": ...}``: the response half of the bidirectional RPC."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    functionResponse: FunctionResponsePayload


# -- unions ----------------------------------------------------------------------------------

_SERVER_KINDS = (
    "createSurface",
    "updateComponents",
    "updateDataModel",
    "deleteSurface",
    "callFunction",
)
_CLIENT_KINDS = ("action", "error", "functionResponse")


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


ServerToClientMessage = Annotated[
    Annotated[CreateSurfaceMessage, Tag("createSurface")]
    | Annotated[UpdateComponentsMessage, Tag("updateComponents")]
    | Annotated[UpdateDataModelMessage, Tag("updateDataModel")]
    | Annotated[DeleteSurfaceMessage, Tag("deleteSurface")]
    | Annotated[CallFunctionMessage, Tag("callFunction")],
    _kind(_SERVER_KINDS),
]
"""Any message a server sends to a client."""

ClientToServerMessage = Annotated[
    Annotated[ActionMessage, Tag("action")]
    | Annotated[ErrorMessage, Tag("error")]
    | Annotated[FunctionResponseMessage, Tag("functionResponse")],
    _kind(_CLIENT_KINDS),
]
"""Any message a client sends to a server."""

_SERVER: TypeAdapter[ServerToClientMessage] = TypeAdapter(ServerToClientMessage)
_CLIENT: TypeAdapter[ClientToServerMessage] = TypeAdapter(ClientToServerMessage)

WireInput = str | bytes | Mapping[str, Any] | BaseModel
"""What the parsers accept: JSON text or bytes, a decoded JSON object, or a model."""


def _parse(adapter: TypeAdapter[Any], data: WireInput, kinds: tuple[str, ...], side: str) -> Any:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json", exclude_none=True)
    try:
        if isinstance(data, (str, bytes)):
            return adapter.validate_json(data)
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise A2UIProtocolError(
            f"not a valid A2UI {side} message (expected exactly one of {', '.join(kinds)}): "
            f"{exc.error_count()} error(s), first: {exc.errors()[0]['msg']}",
            details={
                "errors": exc.errors(include_url=False, include_input=False, include_context=False)
            },
        ) from None


def parse_server_message(data: WireInput) -> ServerToClientMessage:
    """Parse a server→client message.

    Raises:
        A2UIProtocolError: Malformed JSON, no or several message keys, or a bad payload.
    """
    return _parse(_SERVER, data, _SERVER_KINDS, "server-to-client")


def parse_client_message(data: WireInput) -> ClientToServerMessage:
    """Parse a client→server message.

    Raises:
        A2UIProtocolError: Malformed JSON, no or several message keys, or a bad payload.
    """
    return _parse(_CLIENT, data, _CLIENT_KINDS, "client-to-server")


def is_action(message: ClientToServerMessage) -> TypeGuard[ActionMessage]:
    """Whether a parsed client message is an ``action``."""
    return isinstance(message, ActionMessage)


def is_function_response(message: ClientToServerMessage) -> TypeGuard[FunctionResponseMessage]:
    """Whether a parsed client message is a ``functionResponse`` (twin of :func:`is_action`)."""
    return isinstance(message, FunctionResponseMessage)


def is_call_function(message: ServerToClientMessage) -> TypeGuard[CallFunctionMessage]:
    """Whether a parsed server message is a ``callFunction``."""
    return isinstance(message, CallFunctionMessage)
