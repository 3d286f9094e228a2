"""The official A2UI v1.0 validators, as the official packages ship them.

- The JSON Schemas of npm ``@a2ui/web_core`` 0.11.0, which ``.ci/run`` fetches with
  ``npm pack`` into ``.cache/a2ui`` (nothing of it is kept in the repository); set
  ``LOOM_A2UI_WEB_CORE`` to use another unpacked copy.
- The pydantic models of PyPI ``a2ui-core`` (a test dependency).

A missing schema package skips the tests that need it, or fails them when
``LOOM_REQUIRE_EMULATORS=1`` (as on CI), so a machine without it cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

REPO = Path(__file__).resolve().parents[2]
WEB_CORE_VERSION = "0.11.0"
BASE = "https://a2ui.org/specification/v1_0/"


def web_core_dir() -> Path:
    """The unpacked ``@a2ui/web_core`` package, or a skip (a failure on CI)."""
    given = os.environ.get("LOOM_A2UI_WEB_CORE")
    root = Path(given) if given else REPO / ".cache" / "a2ui" / "web_core" / "package"
    if not (root / "src" / "v1_0" / "schemas").is_dir():
        reason = f"@a2ui/web_core {WEB_CORE_VERSION} is not unpacked at {root} (.ci/run fetches it)"
        if os.environ.get("LOOM_REQUIRE_EMULATORS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return root


@cache
def _schemas() -> dict[str, dict[str, Any]]:
    folder = web_core_dir() / "src" / "v1_0" / "schemas"
    found = {p.name: json.loads(p.read_text()) for p in folder.glob("*.json")}
    found["basic_catalog.json"] = json.loads((folder / "catalogs/basic/catalog.json").read_text())
    return found


def _validator(name: str, catalog: dict[str, Any] | None) -> Draft202012Validator:
    schemas = _schemas()
    resources = [(BASE + n, DRAFT202012.create_resource(s)) for n, s in schemas.items()]
    chosen = catalog if catalog is not None else schemas["basic_catalog.json"]
    resources.append((BASE + "catalog.json", DRAFT202012.create_resource(chosen)))
    registry: Registry[Any] = Registry().with_resources(resources)
    return Draft202012Validator(schemas[name], registry=registry)


def schema_errors(name: str, instance: Any, *, catalog: dict[str, Any] | None = None) -> list[str]:
    """What the official schema ``name`` finds wrong with ``instance`` (empty: valid).

    ``catalog`` stands in for ``catalog.json`` (the functions a call may name); by default
    the official basic catalog (the components a surface may hold).
    """
    validator = _validator(name, catalog)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]
