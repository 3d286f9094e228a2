"""MkDocs hook: the decision records (``docs/adr/*.md``) in the navigation, newest last.

Listed from the folder at build time, so an ADR added by anyone appears without editing
``mkdocs.yml``; each entry is titled by the record's first heading.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return re.sub(r"\s+", " ", line[2:]).strip()
    return path.stem


def on_config(config: Any) -> Any:
    """Append "Decisions" (the index, then every record) to the configured navigation."""
    adr = Path(config["docs_dir"]) / "adr"
    records = sorted(p for p in adr.glob("[0-9]*.md"))
    entries: list[Any] = [{"Index": "adr/index.md"}]
    entries += [{_title(p): f"adr/{p.name}"} for p in records]
    config["nav"].append({"Decisions": entries})
    return config
