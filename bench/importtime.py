"""Cold-import cost of the Cloud Run entry point, functions/main.py.

Every Cloud Run cold start pays for importing ``main`` before it can answer, so
this measures ``python -X importtime -c "import main"`` with ``functions/`` on
``sys.path`` and a throw-away SQLite store, and reports the cumulative time of
the top-level import (the median of several fresh interpreters, after one untimed
run that writes the bytecode caches, as the image has them) as one JSON line:

    python bench/importtime.py            # {"main_import_s": 0.412, ...}
    python bench/importtime.py --module json --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS_DIR = REPO_ROOT / "functions"

# "import time:       123 |      4567 |   package.module"
_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S.*)$")


def cumulative_import_us(stderr: str, module: str) -> int:
    """Cumulative microseconds of the top-level import of ``module`` in ``-X importtime`` output.

    Raises:
        ValueError: if ``module`` was not imported at top level (e.g. it was already loaded
            or the import failed).
    """
    for line in stderr.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        _self_us, cumulative, indent, name = match.groups()
        # The top-level import is the least indented entry (one space after the bar).
        if name.strip() == module and len(indent) <= 1:
            return int(cumulative)
    raise ValueError(f"no top-level import of {module!r} in the -X importtime output")


def measure_once(module: str, env: dict[str, str]) -> float:
    """Seconds to import ``module`` in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        check=False,
        timeout=300,
    )
    if result.returncode != 0:
        # Drop the import-time table; keep the traceback.
        traceback = result.stderr[result.stderr.find("Traceback") :]
        raise RuntimeError(f"import {module} failed:\n{traceback[-4000:]}")
    return cumulative_import_us(result.stderr, module) / 1_000_000


def measure(module: str = "main", runs: int = 5) -> float:
    """Median import time in seconds over ``runs`` fresh interpreters."""
    with tempfile.TemporaryDirectory(prefix="loom-importtime-") as tmp:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(FUNCTIONS_DIR), *filter(None, [env.get("PYTHONPATH")])]
        )
        env["LOOM_STORE"] = f"sqlite:///{Path(tmp) / 'x.db'}"
        # The image ships compiled bytecode; one untimed run writes it here too,
        # so that no sample pays for compiling the sources.
        measure_once(module, env)
        samples = [measure_once(module, env) for _ in range(runs)]
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Cold-import cost of functions/main.py, as one JSON line."
    )
    parser.add_argument("--module", default="main", help="module to import (default: main)")
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters (default: 5)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    try:
        seconds = measure(args.module, args.runs)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    print(json.dumps({f"{args.module}_import_s": round(seconds, 4)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
