"""Steps per second and latency of 80 concurrent executes against one served worker.

Runs the image's command line (the Dockerfile's ENTRYPOINT) with the env Terraform sets —
its thread count included — on SQLite and on the Firestore emulator, starts N executions of a
10-step flow (strict, then batched durability), sends their N ``POST /execute`` at once as
Cloud Tasks would, and reports steps per second over the batch and the p50/p99 latency of
one execute. A warm-up batch runs first.

    python bench/served_throughput.py [-n 80] [--steps 10] [--json out.json]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.deploy.local_env import entrypoint_argv

from bench.concurrency import REPO_ROOT, server_env
from bench.concurrency import _free_port as free_port  # pyright: ignore[reportPrivateUsage]
from bench.concurrency import _wait_healthy as wait_healthy  # pyright: ignore[reportPrivateUsage]
from bench.concurrency_app import app
from bench.firestore_ops import emulator
from loom.config import open_store
from loom.runtime import Runtime


async def _create(store_url: str, flow: str, n: int, steps: int) -> list[str]:
    runtime = Runtime(app, open_store(store_url))
    ids = [f"{flow}-{uuid.uuid4().hex[:12]}" for _ in range(n)]
    try:
        for eid in ids:
            await runtime.start(flow, steps, execution_id=eid, run=False)
    finally:
        await runtime.store.aclose()
    return ids


async def _execute_all(url: str, flow: str, ids: list[str]) -> tuple[float, list[float], int]:
    limits = httpx.Limits(max_connections=len(ids), max_keepalive_connections=len(ids))
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600) as client:

        async def one(eid: str) -> tuple[float, bool]:
            package = {"execution_id": eid, "flow": flow, "reason": "start"}
            began = time.perf_counter()
            reply = await client.post("/execute", json={"executionPackage": package})
            done = reply.status_code == 200 and reply.json().get("status") == "completed"
            if not done:
                print(f"{eid}: {reply.status_code} {reply.text[:300]}", file=sys.stderr)
            return time.perf_counter() - began, done

        began = time.perf_counter()
        results = await asyncio.gather(*(one(eid) for eid in ids))
        wall = time.perf_counter() - began
    return wall, [r[0] for r in results], sum(1 for r in results if r[1])


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) of process ``pid`` and its descendants so far."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += cpu.get(current, 0.0)
        todo += [child for child, parent in parents.items() if parent == current]
    return total


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


Runs = list[tuple[float, list[float], int, float]]


def _row(
    store_url: str, flow: str, threads: str | None, n: int, steps: int, runs: Runs
) -> dict[str, Any]:
    """Medians over the rounds of one flow (one durability)."""
    walls = [wall for wall, _, _, _ in runs]
    return {
        "store": store_url.split(":", 1)[0],
        "durability": "batched" if flow.endswith("batched") else "strict",
        "threads": threads,
        "executes": n,
        "rounds": len(runs),
        "completed": min(done for _, _, done, _ in runs),
        "steps_per_s": round(n * steps / statistics.median(walls), 1),
        "wall_s": round(statistics.median(walls), 3),
        "p50_s": round(statistics.median(statistics.median(lat) for _, lat, _, _ in runs), 3),
        "p99_s": round(statistics.median(_percentile(lat, 0.99) for _, lat, _, _ in runs), 3),
        # The server's CPU per execute: what a busy machine stretches least.
        "server_cpu_ms_per_execute": round(statistics.median(c for *_, c in runs) / n * 1000, 2),
    }


def _batch(
    url: str, flow: str, ids: list[str], server: int
) -> tuple[float, list[float], int, float]:
    """One batch of executes; its wall time, latencies, completions and server CPU."""
    before = _tree_cpu(server)
    wall, latencies, done = asyncio.run(_execute_all(url, flow, ids))
    return wall, latencies, done, _tree_cpu(server) - before


def measure(store_url: str, n: int, steps: int, rounds: int = 3) -> list[dict[str, Any]]:
    """Serve, warm up, then one batch per durability; the figures of each batch."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loom-bench-served-") as tmp:
        port = free_port()
        env, _ = server_env(Path(tmp), port, None)
        env["LOOM_STORE"] = store_url.replace("{tmp}", tmp)
        # The image installs the engine and its Google Cloud adapters; from a checkout, both
        # source directories go on the path of the server's interpreter.
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), str(REPO_ROOT / "functions"), str(REPO_ROOT / "infra")]
        )
        # Strict and batched alternate, so a busy moment of the machine hits both alike.
        flows = [f for r in range(rounds) for f in ("steps", "steps.batched")[:: 1 - 2 * (r % 2)]]
        batches = [(f, asyncio.run(_create(env["LOOM_STORE"], f, n, steps))) for f in flows]
        warm = asyncio.run(_create(env["LOOM_STORE"], "steps", n, steps))
        url = f"http://127.0.0.1:{port}"
        log_path = Path(tmp) / "server.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                entrypoint_argv(), env=env, cwd=REPO_ROOT, stdout=log, stderr=log
            )
        try:
            wait_healthy(url, proc)
            asyncio.run(_execute_all(url, "steps", warm))
            runs = [(f, _batch(url, f, ids, proc.pid)) for f, ids in batches]
            for flow in ("steps", "steps.batched"):
                mine = [r for f, r in runs if f == flow]
                rows.append(_row(store_url, flow, env.get("THREADS"), n, steps, mine))
        except Exception:
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            raise
        finally:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
            if proc.poll() is None:
                proc.kill()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", type=int, default=80, help="concurrent executes (default 80)")
    parser.add_argument("--steps", type=int, default=10, help="steps per flow (default 10)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    rows = measure("sqlite:///{tmp}/loom.db", args.n, args.steps)
    with emulator():
        rows += measure(f"firestore://loom-bench/s{uuid.uuid4().hex[:20]}", args.n, args.steps)
    text = json.dumps(rows, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
