"""What a renderer advertises it can do, and the check that a call stays within it.

A v1.0 renderer sends its capabilities to the agent (in A2A metadata)::

    {"v1.0": {"supportedCatalogIds": ["example.com:checkout/v1"],
              "inlineCatalogs": [{"catalogId": "...", "functions": {...}}]}}

Loom calls a renderer function only from a catalog the renderer advertised, and, for an
inline catalog, only a function that catalog declares and lets an agent call
(``allowedCallers`` of ``agentOnly`` or ``rendererOrAgent``; the official default is
``rendererOnly``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from loom.plugins.a2ui.errors import A2UIProtocolError, CatalogValidationError
from loom.plugins.a2ui.protocol import A2UI_VERSION

_AGENT_CALLERS = ("agentOnly", "rendererOrAgent")


@dataclass(frozen=True)
class RendererCapabilities:
    """A renderer's advertised catalogs.

    Attributes:
        supported_catalog_ids: Catalogs the renderer knows by id.
        inline_catalogs: Catalog documents the renderer sent inline, by catalog id.
    """

    supported_catalog_ids: frozenset[str]
    inline_catalogs: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict[str, Mapping[str, Any]]
    )

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> RendererCapabilities:
        """Read ``{"v1.0": {"supportedCatalogIds": [...], "inlineCatalogs": [...]}}``.

        Raises:
            A2UIProtocolError: No v1.0 entry, or malformed.
        """
        entry = data.get(A2UI_VERSION)
        if not isinstance(entry, Mapping):
            raise A2UIProtocolError(f"renderer capabilities carry no {A2UI_VERSION!r} entry")
        caps = cast(Mapping[str, Any], entry)
        ids = caps.get("supportedCatalogIds")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in cast(list[Any], ids)):
            raise A2UIProtocolError("supportedCatalogIds must be a list of strings")
        inline: dict[str, Mapping[str, Any]] = {}
        for doc in cast(list[Any], caps.get("inlineCatalogs") or []):
            if not isinstance(doc, Mapping) or not isinstance(doc.get("catalogId"), str):  # pyright: ignore[reportUnknownMemberType]
                raise A2UIProtocolError("an inline catalog needs a catalogId")
            inline[cast(str, doc["catalogId"])] = cast(Mapping[str, Any], doc)
        return cls(frozenset(cast(list[str], ids)), inline)

    def check_call(self, catalog_id: str, name: str) -> None:
        """Refuse a call the renderer did not advertise it would take from an agent.

        Raises:
            CatalogValidationError: Catalog not advertised, or (inline) function undeclared
                or not callable by an agent.
        """
        inline = self.inline_catalogs.get(catalog_id)
        if inline is None:
            if catalog_id not in self.supported_catalog_ids:
                raise CatalogValidationError(
                    f"the renderer did not advertise catalog {catalog_id!r} "
                    f"(supported: {sorted(self.supported_catalog_ids)})",
                    details={"catalogId": catalog_id, "function": name},
                )
            return
        functions = cast(Mapping[str, Any], inline.get("functions") or {})
        definition = functions.get(name)
        if not isinstance(definition, Mapping):
            raise CatalogValidationError(
                f"the renderer's inline catalog {catalog_id!r} has no function {name!r}",
                details={"catalogId": catalog_id, "function": name},
            )
        callers = cast(Mapping[str, Any], definition).get("allowedCallers", "rendererOnly")
        if callers not in _AGENT_CALLERS:
            raise CatalogValidationError(
                f"the renderer's function {name!r} is {callers}: an agent may not call it",
                details={"catalogId": catalog_id, "function": name, "allowedCallers": callers},
            )
