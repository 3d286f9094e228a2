"""The catalog's ``functions`` vocabulary: what a client can be asked to run, and what it returns.

A function is declared with JSON Schemas for its ``args`` and ``returns``. A client's result is
client-controlled input that becomes a durable resume payload or step output, so it is checked
against ``returns`` before a flow can act on it; arguments are checked before a request leaves.
A pydantic model or any type pydantic understands may stand in for a schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from loom.errors import ConfigurationError
from loom.plugins.a2ui.errors import CatalogValidationError
from loom.plugins.a2ui.schema import check_schema, validate

JsonSchema = dict[str, Any] | bool
"""A JSON Schema: an object, or ``True`` (anything) / ``False`` (nothing)."""

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class CatalogFunctionSchema(BaseModel):
    """One catalog function: its name and the schemas of its arguments and result.

    Attributes:
        name: The function's name, as ``callFunction`` names it.
        description: What it does (for people and for prompts).
        args: JSON Schema of the ``args`` object.
        returns: JSON Schema of the ``result``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str | None = None
    args: JsonSchema = Field(default_factory=lambda: dict(_ANY_OBJECT))
    returns: JsonSchema = True

    def model_post_init(self, context: Any, /) -> None:
        """Refuse schemas this plugin could not fully enforce."""
        check_schema(self.args, f"{self.name}.args")
        check_schema(self.returns, f"{self.name}.returns")

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
                f"invalid {what} for client function {self.name!r} (declared {slot} schema): "
                f"{shown}",
                details={"function": self.name, "schema": slot, "errors": errors},
            )

    def to_wire(self) -> dict[str, Any]:
        """The JSON form a catalog document carries."""
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
) -> CatalogFunctionSchema:
    """Declare a client function.

    Args:
        name: Its name.
        args_schema: JSON Schema (or a pydantic model/type) of its arguments; default: any
            JSON object.
        returns_schema: JSON Schema (or a pydantic model/type) of its result; default: any.
        description: What it does.

    Raises:
        ConfigurationError: A schema uses a keyword this plugin cannot enforce.
    """
    return CatalogFunctionSchema(
        name=name,
        description=description,
        args=_as_schema(args_schema, dict(_ANY_OBJECT)),
        returns=_as_schema(returns_schema, True),
    )


class A2UICatalog:
    """The functions a surface's client offers, by name.

    Args:
        functions: The declared functions.
        catalog_id: The catalog's id, as ``createSurface`` names it.
    """

    def __init__(
        self, functions: Iterable[CatalogFunctionSchema] = (), *, catalog_id: str | None = None
    ) -> None:
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
                f"client function {name!r} is not in the catalog (declared: {known})",
                details={"function": name},
            ) from None

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

    def to_wire(self) -> dict[str, Any]:
        """``{"catalogId"?, "functions": [...]}``."""
        wire: dict[str, Any] = {"functions": [f.to_wire() for f in self]}
        if self.catalog_id is not None:
            wire["catalogId"] = self.catalog_id
        return wire
