"""Scale benchmarks, this checkout side by side with another (the current main), on the
Firestore emulator: purge executions a second, grants a second on one queue, and the
latency of listings across shards (``bench/scale_side.py`` says what each measures).

Run from the repository root (starts the emulator unless ``FIRESTORE_EMULATOR_HOST`` is
set)::

    git worktree add --detach /tmp/scale-base main   # the checkout to compare with
    python bench/scale.py --base /tmp/scale-base [--runs 3] [--json results.json]

Each side runs in a process of its own, with its own checkout's ``loom`` (its virtualenv
at ``BASE/.venv``, else this interpreter with ``BASE``'s sources first on the path); the
figures are medians of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.*, tests.procs

from bench.firestore_ops import emulator

SIDE = Path(__file__).with_name("scale_side.py")
WHAT = ("purge", "admit", "list")


def side(python: str, root: Path, what: str, n: int) -> dict[str, Any]:
    """One measurement by the checkout at ``root``."""
    env = {**os.environ, "PYTHONPATH": f"{root / 'functions'}:{root / 'infra'}"}
    out = subprocess.run(
        [python, str(SIDE), what, "--n", str(n)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        check=False,
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(f"{what} on {root} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {
        k: statistics.median(r[k] for r in runs)
        for k in runs[0]
        if isinstance(runs[0][k], int | float)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000, help="executions the purge deletes")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    venv = args.base / ".venv" / "bin" / "python"
    base_python = str(venv) if venv.exists() else sys.executable
    results: dict[str, dict[str, dict[str, float]]] = {}
    with emulator():
        for what in WHAT:
            results[what] = {
                "base": medians(
                    [side(base_python, args.base, what, args.n) for _ in range(args.runs)]
                ),
                "this": medians(
                    [side(sys.executable, here, what, args.n) for _ in range(args.runs)]
                ),
            }
            print(what, json.dumps(results[what]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
