"""The durable no-op step of this checkout against another one, alternated in one run.

Each round runs ``bench.core.noop_step`` in a fresh process per checkout, alternating which
goes first, so disk and CPU noise hit both alike; medians are printed as JSON::

    python bench/step_side_by_side.py --baseline <another checkout> [--rounds 4] [--flows 100]

``--memory`` runs the same steps on the in-memory store: the engine's own per-step work,
without the fsync that dominates (and makes noisy) the SQLite figure on a shared disk.
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

HERE = Path(__file__).resolve().parents[1]
CODE = (
    "import asyncio, json, sys; import bench.core as core; from loom.store import "
    "InMemoryEventStore\n"
    "if sys.argv[2] == 'memory': core.SqliteEventStore = lambda path: InMemoryEventStore()\n"
    "print(json.dumps(asyncio.run(core.noop_step(flows=int(sys.argv[1])))))"
)


def _one(root: Path, flows: int, store: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{root}/functions:{root}/infra:{root}"}
    out = subprocess.run(
        [sys.executable, "-c", CODE, str(flows), store],
        env=env,
        cwd=HERE,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="The other checkout.")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--flows", type=int, default=100)
    parser.add_argument("--memory", action="store_true", help="The in-memory store.")
    args = parser.parse_args()
    store = "memory" if args.memory else "sqlite"
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
    for n in range(args.rounds):
        order = [("baseline", args.baseline), ("this", HERE)]
        for name, root in order if n % 2 == 0 else reversed(order):
            runs[name].append(_one(root, args.flows, store))
    keys = ("marginal_ms_per_step", "all_in_ms_per_step", "empty_flow_ms")
    medians = {
        name: {k: round(statistics.median(r[k] for r in rows), 4) for k in keys}
        for name, rows in runs.items()
    }
    ratio = medians["this"]["marginal_ms_per_step"] / medians["baseline"]["marginal_ms_per_step"]
    print(json.dumps({**medians, "this_over_baseline_marginal": round(ratio, 3)}))


if __name__ == "__main__":
    main()
