"""An execution holding 1,500 unread messages, and 40 waiters on it, beside other traffic.

One worker process as deployed (functions-framework under gunicorn, ``THREADS`` 82 as
Terraform sets it by default, SQLite on disk). One execution waits on a gate for ever while 1,500 messages arrive on a topic it
never reads; then 40 clients wait on ``GET /executions/{id}/events/{key}?timeout=15`` for a
value it never publishes, each asking again as soon as its wait ends. Before the waiters and
while they wait, the script times ``/health`` and two unrelated requests (a read of another
execution, a start of a one-step flow): medians of 60 calls each, and the ratio loaded /
idle. Target: every ratio at most 2.

    python bench/limits.py                              # this checkout
    python bench/limits.py --baseline ../other-checkout # the same, side by side
    python bench/limits.py --record                     # and add a section to RESULTS.md

Prints one JSON line per checkout.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
MESSAGES = 1_500
WAITERS = 40
SAMPLES = 60
THREADS = 82  # what Terraform sets by default: the concurrency (80) + the probes' 2
PROBES = {
    "/health": ("GET", "/health", None),
    "read another execution": ("GET", "/executions/other?history=false", None),
    "start a one-step flow": ("POST", "/executions", "start"),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(checkout: Path, workdir: Path, secret: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {
        **os.environ,
        # The checkout's engine (and its Google adapters) first; this one's bench app last.
        "PYTHONPATH": os.pathsep.join(
            str(p) for p in (checkout / "functions", checkout / "infra", checkout, REPO_ROOT)
        ),
        "LOOM_APP": "bench.limits_app:app",
        "LOOM_STORE": f"sqlite:///{workdir / 'loom.db'}",
        "LOOM_RESUME_SECRET": secret,
        "THREADS": str(THREADS),
        "LOOM_LOG_FORMAT": "json",
    }
    argv = [sys.executable, "-m", "functions_framework", "--source"]
    argv += [str(checkout / "functions" / "main.py"), "--target", "worker"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    log = (workdir / "server.log").open("wb")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the worker never became healthy: {(workdir / 'server.log').read_text()}")


def _timings(client: httpx.Client, tag: str) -> tuple[dict[str, float], dict[str, int]]:
    """Median seconds of each probe over SAMPLES calls made one after another, and how many
    of them did not answer 200 (an unhealthy ``/health`` is 503)."""
    medians: dict[str, float] = {}
    failed: dict[str, int] = {}
    for name, (method, path, body) in PROBES.items():
        took: list[float] = []
        failed[name] = 0
        for n in range(SAMPLES):
            payload = None
            if body == "start":
                payload = {"flow": "bench.echo", "input": n, "execution_id": f"{tag}-{n}"}
            began = time.perf_counter()
            answer = client.request(method, path, json=payload, timeout=60)
            took.append(time.perf_counter() - began)
            failed[name] += answer.status_code != 200
        medians[name] = statistics.median(took)
    return medians, failed


def _fill(url: str, secret: str) -> None:
    bearer = {"Authorization": f"Bearer {secret}"}

    def send(n: int) -> None:
        body = {"topic": "spam", "payload": {"n": n, "pad": "x" * 200}, "message_id": f"m{n}"}
        for _ in range(50):  # racing senders overtake each other (409): the id makes a retry safe
            answer = httpx.post(
                f"{url}/executions/deaf/messages", json=body, headers=bearer, timeout=60
            )
            if answer.status_code != 409:
                break
        if answer.status_code != 200:
            raise RuntimeError(f"message {n}: {answer.status_code} {answer.text[:300]}")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(send, range(MESSAGES)))


def measure(checkout: Path) -> dict[str, Any]:
    """Idle and loaded medians of every probe, on a fresh worker of ``checkout``."""
    secret = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="loom-bench-limits-") as tmp:
        proc, url = _serve(checkout, Path(tmp), secret)
        stop = threading.Event()
        waiters: list[threading.Thread] = []
        try:
            with httpx.Client(base_url=url) as client:
                for eid, flow in (("deaf", "bench.deaf"), ("other", "bench.echo")):
                    body = {"flow": flow, "input": None, "execution_id": eid}
                    client.post("/executions", json=body, timeout=60).raise_for_status()
                _fill(url, secret)
                _timings(client, "warm")  # first calls of each kind pay one-off costs
                idle, idle_failed = _timings(client, "idle")
                waited = {"calls": 0, "non_200_404": 0}

                def wait() -> None:
                    with httpx.Client(base_url=url) as own:
                        while not stop.is_set():
                            answer = own.get("/executions/deaf/events/never?timeout=15", timeout=60)
                            waited["calls"] += 1
                            if answer.status_code not in (200, 404):
                                waited["non_200_404"] += 1
                                time.sleep(1.0)  # (a 429: as Retry-After says)

                waiters = [threading.Thread(target=wait, daemon=True) for _ in range(WAITERS)]
                for thread in waiters:
                    thread.start()
                time.sleep(2.0)  # every waiter is waiting now
                loaded, loaded_failed = _timings(client, "loaded")
        finally:
            stop.set()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    ratios = {k: loaded[k] / idle[k] for k in idle}
    return {
        "checkout": str(checkout),
        "messages": MESSAGES,
        "waiters": WAITERS,
        "idle_s": idle,
        "loaded_s": loaded,
        "ratio": ratios,
        "not_200": {"idle": idle_failed, "loaded": loaded_failed},
        "waiter_calls": waited["calls"],
        "waiter_errors": waited["non_200_404"],
        "met": all(r <= 2.0 for r in ratios.values())
        and not any(idle_failed.values())
        and not any(loaded_failed.values()),
    }


def _table(results: list[dict[str, Any]]) -> str:
    names = list(PROBES)
    head = "| request | " + " | ".join(
        f"{Path(r['checkout']).name}: idle | loaded | ratio" for r in results
    )
    lines = [head + " |", "|---|" + "---:|---:|---:|" * len(results)]
    for name in names:
        cells = []
        for r in results:
            idle, loaded, ratio = r["idle_s"][name], r["loaded_s"][name], r["ratio"][name]
            bad = r["not_200"]["loaded"][name]
            note = f" ({bad} of {SAMPLES} not 200)" if bad else ""
            cells.append(f"{idle * 1000:.1f} ms | {loaded * 1000:.1f} ms{note} | {ratio:.2f} x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _record(results: list[dict[str, Any]], command: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    met = "met" if results[0]["met"] else "**missed**"
    section = (
        f"\n## An execution holding {MESSAGES} unread messages, {WAITERS} waiters on it\n\n"
        f"Measured {now} by `{command}`: one worker as deployed (functions-framework, "
        f"gunicorn, THREADS={THREADS}, SQLite on disk); medians of {SAMPLES} calls made one "
        f"after another, before the waiters (idle) and while {WAITERS} clients wait on "
        "`GET /executions/deaf/events/never?timeout=15` (loaded), the execution holding "
        f"{MESSAGES} messages it never reads. Target: loaded within 2x idle — {met} for this "
        "checkout (the first columns).\n\n" + _table(results) + "\n"
    )
    path = REPO_ROOT / "bench" / "RESULTS.md"
    path.write_text(path.read_text(encoding="utf-8") + section, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout, measured beside")
    parser.add_argument("--record", action="store_true", help="add a section to RESULTS.md")
    args = parser.parse_args()
    results = [measure(REPO_ROOT)]
    if args.baseline is not None:
        results.append(measure(args.baseline.resolve()))
    for result in results:
        print(json.dumps(result))
    print(_table(results))
    if args.record:
        command = "python bench/limits.py" + (
            f" --baseline {args.baseline}" if args.baseline is not None else ""
        )
        _record(results, command + " --record")


if __name__ == "__main__":
    main()
