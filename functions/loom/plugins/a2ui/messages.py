"""The A2UI v1.0 wire messages as pydantic models, field names exactly as on the wire.

Kept apart from :mod:`loom.plugins.a2ui.protocol`, which parses and classifies them: this
module says what each message *is* (its fields, its constraints, its wire form), that one
how a received message is recognised. Import them from either.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
