"""The README's snippets for messages, published state and continue-as-new run as shown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Flows that talk: messages, published state, continue-as-new"
EXPECTED = [
    "['hello', 'hello', 'hi']",
    "https://pay.example/o-1",
    "3 10",
]


def _blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_section_has_one_snippet_per_feature() -> None:
    assert len(_blocks()) == len(EXPECTED)


@pytest.mark.parametrize("n", range(len(EXPECTED)))
def test_snippet_runs_and_prints_what_it_says(n: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _blocks()[n]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == EXPECTED[n]
