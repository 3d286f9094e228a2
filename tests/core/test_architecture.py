"""The architecture page draws the import contracts as they are: the same layers, in the
same order, as ``pyproject.toml``'s layers contract (which ``lint-imports`` enforces)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contract_layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    return [re.split(r"\s*[:|]\s*", layer.strip()) for layer in layers]


def _drawn_layers() -> list[list[str]]:
    page = (ROOT / "docs" / "architecture.md").read_text()
    picture = page.split("```", 2)[1]
    rows = [line for line in picture.splitlines() if line and not line.lstrip().startswith("|")]
    # Each row: a label, then the layer's modules from the 19th column on.
    return [re.split(r"\s*:\s*", row[18:].strip()) for row in rows]


def test_the_picture_lists_the_contracts_layers_in_order() -> None:
    assert _drawn_layers() == _contract_layers()


def test_the_kernel_sits_under_primitives_and_operator_tools() -> None:
    flat = [layer[0] for layer in _contract_layers()]
    assert flat.index("ops") < flat.index("primitives") < flat.index("kernel")


def test_at_most_twenty_modules_sit_directly_in_the_engine_package() -> None:
    modules = sorted(p.name for p in (ROOT / "functions" / "loom").glob("*.py"))
    assert len(modules) <= 20, modules
