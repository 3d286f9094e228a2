"""Two checkouts measured alternately in one run: what the side-by-side benchmarks share.

Imports no engine: the script that uses it runs itself once per checkout and round as a
child process (``SCRIPT --child ROOT``), and each child imports the engine of its own
checkout; the parent only alternates the order and takes medians.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

THIS = Path(__file__).resolve().parents[1]


def commit_ms(commits: int = 300) -> float:
    """The floor: one fsync'd SQLite commit, measured exactly as ``bench/run.py`` does."""
    from core import fsync_baseline  # pyright: ignore[reportMissingImports]

    return float(fsync_baseline(commits)["sqlite_commit_ms"])


def run_child(script: Path, root: Path, timeout: float) -> dict[str, float]:
    """``script --child root`` in a fresh process; the JSON figures it prints last."""
    proc = subprocess.run(
        [sys.executable, str(script), "--child", str(root)],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    return json.loads(proc.stdout.splitlines()[-1])


def compare(
    script: Path, baseline: Path, rounds: int, figures: Iterable[str], timeout: float
) -> dict[str, dict[str, float]]:
    """Medians of each figure for ``baseline`` and this checkout, alternating per round."""
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
    for r in range(rounds):
        order = [("baseline", baseline), ("this", THIS)]
        for name, root in order if r % 2 == 0 else order[::-1]:
            runs[name].append(run_child(script, root, timeout))
            print(f"round {r + 1}/{rounds} {name}: {runs[name][-1]}", file=sys.stderr)
    keys = list(figures)
    return {
        name: {k: statistics.median(run[k] for run in results) for k in keys}
        for name, results in runs.items()
    }
