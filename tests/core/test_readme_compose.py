"""The README's snippets for cancellation, flow timeouts and child flows run as shown, and
its command-line block for them too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Flows that compose: cancellation, timeouts, child flows"
EXPECTED = [
    "undid flight\nundid hotel\ncancelled",
    "a-2 cancelled the flow's timeout passed",
    "1000\n{'execution_id': 'r-1', 'step_id': '3'}",
]


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def _blocks(fence: str) -> list[str]:
    return re.findall(rf"```{fence}\n(.*?)```", _section(), re.S)


def test_the_section_has_one_snippet_per_feature() -> None:
    assert len(_blocks("python")) == len(EXPECTED)


@pytest.mark.parametrize("n", range(len(EXPECTED)))
def test_snippet_runs_and_prints_what_it_says(n: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _blocks("python")[n]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == EXPECTED[n]


def test_the_command_line_block_runs(tmp_path: Path) -> None:
    [block] = _blocks("bash")
    script = "set -e\n" + block
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOOM_STORE": f"sqlite:///{tmp_path}/l.db"}
    proc = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout
    assert "t-1  cancelled  error=cancelled: changed my mind" in lines
    assert "t-2  cancelled  error=cancelled: the flow's timeout passed" in lines
    assert "r-1  completed" in lines and "parent r-1 (step 1)" in lines
