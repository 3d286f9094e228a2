"""``examples/commission_local.py``, the README's Commission example, runs as shown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_commission_example_commits_on_a_work_branch(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.commission_local"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "stopped: no_useful_action; performed: ['case-1:0:1']",
        "loom/commission/case-1: Fix the typo",
        "app.py there: print('hello')",
        "main unchanged: print('helo')",
    ]
