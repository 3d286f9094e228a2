"""Two checkouts measured alternately in one run: what the side-by-side benchmarks share.

Imports no engine: the script that uses it runs itself once per checkout and round as a
child process (``SCRIPT --child ROOT``), and each child imports the engine of its own
checkout; the parent only alternates the order and takes medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

THIS = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SIDE_BY_SIDE = "## Side-by-side runs"
SIDE_BY_SIDE_INTRO = (
    "Dated comparisons of two checkouts in one interleaved run; `bench/run.py` keeps this "
    "section when it rewrites its own tables."
)


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


def main(
    doc: str,
    script: Path,
    child: Callable[[str], dict[str, float]],
    figures: Mapping[str, object],
    markdown: Callable[[dict[str, dict[str, float]], int, str], str],
    *,
    rounds: int,
    timeout: float,
) -> None:
    """The command line every side-by-side script shares: ``--baseline``, ``--rounds``,
    ``--record`` (the section goes into ``RESULTS.md``) and the hidden ``--child ROOT``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="another checkout of this repository")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--record", action="store_true", help="add the table to RESULTS.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    if args.baseline is None:
        parser.error("--baseline is required: a checkout to compare with")
    medians = compare(script, args.baseline.resolve(), args.rounds, figures, timeout)
    command = f"python bench/{script.name} --baseline <other checkout> --rounds {args.rounds}"
    section = markdown(medians, args.rounds, command)
    print(section)
    if args.record:
        record(section)


def record(section: str) -> None:
    """Put ``section`` first under the side-by-side heading of ``RESULTS.md`` (newest
    first; ``bench/run.py`` keeps that part when it rewrites its own tables)."""
    text = RESULTS.read_text()
    if SIDE_BY_SIDE not in text:
        text = text.rstrip("\n") + f"\n\n{SIDE_BY_SIDE}\n\n{SIDE_BY_SIDE_INTRO}\n"
    head, _, rest = text.partition(SIDE_BY_SIDE)
    intro, _, older = rest.partition(SIDE_BY_SIDE_INTRO)
    RESULTS.write_text(
        f"{head}{SIDE_BY_SIDE}{intro}{SIDE_BY_SIDE_INTRO}\n\n{section.rstrip()}\n\n{older.lstrip()}"
    )
