"""The catalog's ``functions`` vocabulary: what a renderer can be asked to run, by whom, and
what it returns.

A function is declared with JSON Schemas for its ``args`` and ``returns``, an official
``returnType`` and the official ``allowedCallers``: Loom (the agent) calls only functions
declared ``agentOnly`` or ``rendererOrAgent``. A renderer's result is renderer-controlled input
that becomes a durable resume payload or step output, so it is checked against ``returns``
before a flow can act on it; arguments are checked before a request leaves. ``returns`` is
Loom's extension: the official catalog document (:meth:`A2UICatalog.to_document`) carries
only ``returnType``, and Loom keeps the richer schema on its side. A pydantic model or any
type pydantic understands may stand in for a schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from loom.errors import ConfigurationError
from loom.plugins.a2ui.errors import CatalogValidationError
from loom.plugins.a2ui.protocol import CallerRole
from loom.plugins.a2ui.schema import check_schema, validate

JsonSchema = dict[str, Any] | bool
"""A JSON Schema: an object, or ``True`` (anything) / ``False`` (nothing)."""

ReturnType = Literal["string", "number", "boolean", "array", "object", "any", "void"]
"""The official ``returnType`` vocabulary (v1.0 adds ``validationResult`` for its own
validation functions, which renderers call, not agents)."""

CATALOG_PROTOCOL_VERSION = "1.0"
"""The ``protocolVersion`` of the catalog documents Loom writes."""

_ANY_OBJECT: dict[str, Any] = {"type": "object"}
_SIMPLE_TYPES = ("string", "number", "boolean", "array", "object")


def _return_type_of(returns: JsonSchema) -> ReturnType:
    if isinstance(returns, dict):
        kind = returns.get("type")
        if kind == "integer":
            return "number"
        if kind == "null":
            return "void"
        if isinstance(kind, str) and kind in _SIMPLE_TYPES:
            return kind  # type: ignore[return-value]
    return "any"


class CatalogFunctionSchema(BaseModel):
    """One catalog function: its name, who may call it, and its argument and result schemas.

    Attributes:
        name: The function's name, as ``callFunction.call`` names it.
        description: What it does (for people and for prompts).
        args: JSON Schema of the ``args`` object.
        returns: JSON Schema of the result (Loom's extension of ``returnType``).
        returnType: The official coarse result type (derived from ``returns`` by default).
        allowedCallers: Who may call it; Loom calls only ``agentOnly``/``rendererOrAgent``.
        requiresUserActivation: Whether a call needs a user gesture (then renderer-only).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str | None = None
    args: JsonSchema = Field(default_factory=lambda: dict(_ANY_OBJECT))
    returns: JsonSchema = True
    returnType: ReturnType | None = None
    allowedCallers: CallerRole = "agentOnly"
    requiresUserActivation: bool = False

    @model_validator(mode="after")
    def _checked(self) -> CatalogFunctionSchema:
        check_schema(self.args, f"{self.name}.args")
        check_schema(self.returns, f"{self.name}.returns")
        if self.requiresUserActivation and self.allowedCallers != "rendererOnly":
            raise ConfigurationError(
                f"catalog function {self.name!r} requires user activation, so only the "
                "renderer may call it: declare allowedCallers='rendererOnly'"
            )
        if self.returnType is None:
            object.__setattr__(self, "returnType", _return_type_of(self.returns))
        return self

    @property
    def agent_may_call(self) -> bool:
        """Whether an agent (Loom) may call this function."""
        return self.allowedCallers in ("agentOnly", "rendererOrAgent")

    def validate_args(self, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """Return ``args`` as a dict if it satisfies the ``args`` schema.

        Raises:
            CatalogValidationError: It does not.
        """
        value: dict[str, Any] = dict(args) if args is not None else {}
        self._check(value, self.args, "arguments", "args")
        return value

    def validate_result(self, result: Any) -> Any:
        """Return ``result`` unchanged if it satisfies the ``returns`` schema.

        Raises:
            CatalogValidationError: It does not.
        """
        self._check(result, self.returns, "result", "returns")
        return result

    def _check(self, value: Any, schema: JsonSchema, what: str, slot: str) -> None:
        errors = validate(value, schema)
        if errors:
            shown = "; ".join(errors[:3]) + (
                f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
            )
            raise CatalogValidationError(
                f"invalid {what} for renderer function {self.name!r} (declared {slot} "
                f"schema): {shown}",
                details={"function": self.name, "schema": slot, "errors": errors},
            )

    def definition(self) -> dict[str, Any]:
        """The official v1.0 ``FunctionDefinition``: a schema of the wire ``FunctionCall``."""
        args = self.args if isinstance(self.args, dict) else {}
        doc: dict[str, Any] = {"type": "object"}
        if self.description:
            doc["description"] = self.description
        doc["properties"] = {"call": {"const": self.name}, "args": {"type": "object", **args}}
        doc["required"] = ["call", "args"] if args.get("required") else ["call"]
        doc["returnType"] = self.returnType
        doc["allowedCallers"] = self.allowedCallers
        # Always explicit: the official schema's "requires user activation → renderer only"
        # rule also fires when the field is absent, refusing any agent-callable function.
        doc["requiresUserActivation"] = self.requiresUserActivation
        return doc

    def inline_v09(self) -> dict[str, Any]:
        """The v0.9 inline-capabilities ``FunctionDefinition`` (a list entry)."""
        entry: dict[str, Any] = {"name": self.name}
        if self.description:
            entry["description"] = self.description
        entry["parameters"] = self.args if isinstance(self.args, dict) else dict(_ANY_OBJECT)
        entry["returnType"] = self.returnType
        return entry

    def to_wire(self) -> dict[str, Any]:
        """Loom's own form, ``returns`` included."""
        return self.model_dump(mode="json", exclude_none=True)


def _as_schema(spec: Any, default: JsonSchema) -> JsonSchema:
    if spec is None:
        return default
    if isinstance(spec, bool):
        return spec
    if isinstance(spec, Mapping):
        return dict(spec)  # pyright: ignore[reportUnknownArgumentType]
    try:
        return TypeAdapter(spec).json_schema()
    except Exception as exc:  # pydantic raises several types for "not a schema"
        raise ConfigurationError(f"cannot derive a JSON Schema from {spec!r}: {exc}") from exc


def define_function(
    name: str,
    args_schema: Any = None,
    returns_schema: Any = None,
    *,
    description: str | None = None,
    allowed_callers: CallerRole = "agentOnly",
    return_type: ReturnType | None = None,
    requires_user_activation: bool = False,
) -> CatalogFunctionSchema:
    """Declare a renderer function.

    Args:
        name: Its name.
        args_schema: JSON Schema (or a pydantic model/type) of its arguments; default: any
            JSON object.
        returns_schema: JSON Schema (or a pydantic model/type) of its result; default: any.
        description: What it does.
        allowed_callers: ``agentOnly`` (default), ``rendererOrAgent`` or ``rendererOnly``.
        return_type: The official ``returnType``; default: derived from ``returns_schema``.
        requires_user_activation: Whether a call needs a user gesture.

    Raises:
        ConfigurationError: A schema uses a keyword this plugin cannot enforce.
    """
    return CatalogFunctionSchema(
        name=name,
        description=description,
        args=_as_schema(args_schema, dict(_ANY_OBJECT)),
        returns=_as_schema(returns_schema, True),
        returnType=return_type,
        allowedCallers=allowed_callers,
        requiresUserActivation=requires_user_activation,
    )


class A2UICatalog:
    """The functions a renderer offers under one catalog id.

    Args:
        functions: The declared functions.
        catalog_id: The catalog's id (e.g. ``"example.com:checkout/v1"``), stamped on every
            call and on ``createSurface``.
    """

    def __init__(self, functions: Iterable[CatalogFunctionSchema] = (), *, catalog_id: str):
        if not catalog_id:
            raise ConfigurationError("an A2UI catalog needs a catalogId")
        self.catalog_id = catalog_id
        self._functions: dict[str, CatalogFunctionSchema] = {}
        for fn in functions:
            self.add(fn)

    def add(self, function: CatalogFunctionSchema) -> CatalogFunctionSchema:
        """Add a declared function.

        Raises:
            ConfigurationError: A function of that name is already declared.
        """
        if function.name in self._functions:
            raise ConfigurationError(f"catalog function {function.name!r} is declared twice")
        self._functions[function.name] = function
        return function

    def get(self, name: str) -> CatalogFunctionSchema:
        """The function ``name``.

        Raises:
            CatalogValidationError: The catalog has no such function.
        """
        try:
            return self._functions[name]
        except KeyError:
            known = ", ".join(sorted(self._functions)) or "none"
            raise CatalogValidationError(
                f"renderer function {name!r} is not in catalog {self.catalog_id!r} "
                f"(declared: {known})",
                details={"function": name, "catalogId": self.catalog_id},
            ) from None

    def callable_by_agent(self, name: str) -> CatalogFunctionSchema:
        """The function ``name`` if an agent may call it.

        Raises:
            CatalogValidationError: Unknown, or declared ``rendererOnly``.
        """
        fn = self.get(name)
        if not fn.agent_may_call:
            raise CatalogValidationError(
                f"renderer function {name!r} is {fn.allowedCallers} in catalog "
                f"{self.catalog_id!r}: an agent may not call it",
                details={"function": name, "allowedCallers": fn.allowedCallers},
            )
        return fn

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __iter__(self) -> Iterator[CatalogFunctionSchema]:
        return iter(self._functions.values())

    def validate_args(self, name: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
        """Check ``args`` of function ``name``; see :meth:`CatalogFunctionSchema.validate_args`."""
        return self.get(name).validate_args(args)

    def validate_result(self, name: str, result: Any) -> Any:
        """Check a result of ``name``; see :meth:`CatalogFunctionSchema.validate_result`."""
        return self.get(name).validate_result(result)

    def to_document(self) -> dict[str, Any]:
        """The official v1.0 catalog document (``functions`` as a name → definition map)."""
        names = list(self._functions)
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "catalogId": self.catalog_id,
            "protocolVersion": CATALOG_PROTOCOL_VERSION,
            "functions": {n: self._functions[n].definition() for n in names},
            "$defs": {
                "anyComponent": {"not": {}},
                "anyFunction": {"oneOf": [{"$ref": f"#/functions/{n}"} for n in names]}
                if names
                else {"not": {}},
            },
        }

    def to_inline_v09(self) -> dict[str, Any]:
        """The v0.9 inline-capabilities form (``functions`` as a list)."""
        return {"catalogId": self.catalog_id, "functions": [f.inline_v09() for f in self]}

    def to_wire(self) -> dict[str, Any]:
        """Loom's own form, with each function's ``returns`` schema (the extension)."""
        return {"catalogId": self.catalog_id, "functions": [f.to_wire() for f in self]}
