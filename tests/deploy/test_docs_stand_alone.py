"""The repository's documents stand alone: they cite no document it does not hold (a
design's section numbers, decision records of other repositories, "the seed")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ADRS = {p.name[:4] for p in (ROOT / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md")}
SUFFIXES = {".md", ".py", ".tf", ".yaml", ".yml", ".sh", ".toml", ".hcl", ".txt", ""}
OUTSIDE = re.compile(r"DESIGN\s*§|DESIGN\.md|§\s*\d|\bthe seed\b|\bseeds?/", re.IGNORECASE)
ADR_CITE = re.compile(r"\bADRs? ?(\d{4})\b|\bADRs (\d{4}) and (\d{4})\b")


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [ROOT / p for p in out.splitlines() if Path(p).suffix in SUFFIXES]


def _problems(path: Path, root: Path = ROOT) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return []
    name = path.relative_to(root)
    found = [f"{name}: {m.group(0)!r}" for m in OUTSIDE.finditer(text)]
    for match in ADR_CITE.finditer(text):
        for number in filter(None, match.groups()):
            if number not in ADRS:
                found.append(f"{name}: ADR {number} is not in docs/adr")
    return found


def test_no_document_cites_what_the_repository_does_not_hold() -> None:
    me = Path(__file__).resolve()
    problems = [p for path in _tracked() if path.resolve() != me for p in _problems(path)]
    assert problems == []


def test_the_checker_catches_outside_references(tmp_path: Path) -> None:
    bad = tmp_path / "note.md"
    bad.write_text("as DESIGN §4 says; see ADR 0999 and the seed's table, unlike ADR 0001\n")
    assert len(_problems(bad, tmp_path)) == 3
