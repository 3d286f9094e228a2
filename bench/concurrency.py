"""Concurrent executes on one instance, served as the container serves them.

Cloud Run sends an instance up to ``max_instance_request_concurrency`` requests at once
(Terraform's ``max_concurrency``, 80 by default) and every execute holds its server thread
until the flow blocks or ends. This runs the image's command line (the Dockerfile's
ENTRYPOINT) on this machine with the env Terraform sets (SQLite and a local blob directory
standing in for Firestore and the bucket; no Cloud Tasks, so nothing runs until an execute
arrives), starts N executions of a flow whose one step waits W seconds, sends the N
``POST /execute`` calls at once, as Cloud Tasks would, and reports how long they took, in
multiples of W, next to a baseline: the same N executes with no wait (the server's and
SQLite's own work, every commit fsync'd one after the other). Served in parallel, the waits
overlap each other and that work: about the baseline plus at most one W. Queued behind T
threads: about N / T waits.

    python bench/concurrency.py                          # 80 executes, 1 s async waits
    python bench/concurrency.py --effect sync            # the wait blocks a thread
    python bench/concurrency.py --threads 4              # gunicorn's THREADS overridden

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # run as a script: bench/ and tests/ from the checkout

from tests.deploy.local_env import entrypoint_argv, image_env, terraform_env  # noqa: E402

from bench.concurrency_app import app  # noqa: E402
from loom.config import open_store  # noqa: E402
from loom.runtime import Runtime  # noqa: E402

APP_REF = "bench.concurrency_app:app"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(workdir: Path, port: int, threads: str | None) -> tuple[dict[str, str], list[str]]:
    """The image's ENV, then Terraform's env with local stand-ins for the cloud services."""
    env, dropped = terraform_env(
        {
            "LOOM_APP": APP_REF,
            "LOOM_STORE": f"sqlite:///{workdir / 'loom.db'}",
            "LOOM_BLOBS": f"file://{workdir / 'blobs'}",
            "LOOM_RESUME_SECRET": secrets.token_hex(16),
        }
    )
    merged = {**os.environ, **image_env(), **env, "PORT": str(port)}
    merged["PYTHONPATH"] = str(REPO_ROOT)  # the image's /app
    merged["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if threads is not None:
        merged["THREADS"] = threads
    return merged, dropped


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server not healthy in time")


async def _create(store_url: str, prefix: str, n: int, seconds: float, kind: str) -> list[str]:
    """N started executions, not yet run (their dispatch is what the bench sends)."""
    runtime = Runtime(app, open_store(store_url))
    ids = [f"{prefix}-{i}" for i in range(n)]
    try:
        for eid in ids:
            await runtime.start(
                "wait", {"seconds": seconds, "kind": kind}, execution_id=eid, run=False
            )
    finally:
        await runtime.store.aclose()
    return ids


async def _execute_all(url: str, ids: list[str]) -> tuple[float, list[Any]]:
    limits = httpx.Limits(max_connections=len(ids), max_keepalive_connections=len(ids))
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600) as client:

        async def one(eid: str) -> Any:
            package = {"execution_id": eid, "flow": "wait", "reason": "start"}
            reply = await client.post("/execute", json={"executionPackage": package})
            return reply.json() if reply.status_code == 200 else reply.text

        began = time.perf_counter()
        results = await asyncio.gather(*(one(eid) for eid in ids))
        return time.perf_counter() - began, results


def _completed(results: list[Any]) -> int:
    return sum(1 for r in results if isinstance(r, dict) and r.get("status") == "completed")


def measure(n: int, seconds: float, kind: str, threads: str | None) -> dict[str, Any]:
    """Run the server, send N executes at once (twice), stop it; the figures as a dict.

    The first batch's steps do not wait: it measures what N executes cost the server and
    its store alone (the baseline). The second batch's steps wait ``seconds``; served in
    parallel, it takes the baseline plus at most about one wait.
    """
    with tempfile.TemporaryDirectory(prefix="loom-bench-conc-") as tmp:
        workdir = Path(tmp)
        port = _free_port()
        env, dropped = server_env(workdir, port, threads)
        base_ids = asyncio.run(_create(env["LOOM_STORE"], "base", n, 0.0, kind))
        ids = asyncio.run(_create(env["LOOM_STORE"], "wait", n, seconds, kind))
        url = f"http://127.0.0.1:{port}"
        log_path = workdir / "server.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                entrypoint_argv(), env=env, cwd=REPO_ROOT, stdout=log, stderr=log
            )
        try:
            _wait_healthy(url, proc)
            base_wall, base_results = asyncio.run(_execute_all(url, base_ids))
            wall, results = asyncio.run(_execute_all(url, ids))
        except Exception:
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            raise
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    return {
        "executes": n,
        "completed": min(_completed(base_results), _completed(results)),
        "wait_s": seconds,
        "effect": kind,
        "threads": env.get("THREADS"),
        "baseline_s": round(base_wall, 3),
        "wall_s": round(wall, 3),
        "waits": round(wall / seconds, 2),
        "dropped_env": dropped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=80, help="concurrent executes (default 80)")
    parser.add_argument("--wait", type=float, default=1.0, help="seconds each step waits")
    parser.add_argument("--effect", choices=["async", "sync"], default="async")
    parser.add_argument("--threads", help="override THREADS (default: the image's and Terraform's)")
    args = parser.parse_args(argv)
    result = measure(args.n, args.wait, args.effect, args.threads)
    print(json.dumps(result))
    return 0 if result["completed"] == args.n else 1


if __name__ == "__main__":
    raise SystemExit(main())
