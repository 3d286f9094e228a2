"""Loom's sequential durable step beside Restate's and DBOS's, interleaved in one run.

    python bench/peers.py [--rounds 9] [--steps 20] [--record]

Each system runs the same workflow: ``n`` sequential durable no-op steps, called once with
``n`` steps and once with none, ``--pairs`` times per round; a step costs the difference of
the two medians divided by ``n`` (what the call itself costs cancels out). The systems take
turns call by call, in an order that rotates from round to round, so a busy moment of the
disk hits each alike; the machine's load average is read at every round.

* **Loom**: ``Runtime.start`` in this process on a ``sqlite:///`` store (``open_store``: the
  engine's settings), strict durability (the default) and batched.
* **Restate**: the ``@restatedev/restate-server`` binary from the npm registry, a
  TypeScript-SDK service (``ctx.run`` per step) in Node, called at its HTTP ingress; all of it
  on 127.0.0.1 and free ports.
* **DBOS**: the ``dbos`` package from PyPI, its system database on SQLite, a
  ``@DBOS.workflow`` of ``@DBOS.step`` calls, in a process of its own virtualenv.
* **SQLite commit alone**: one fsync'd one-row commit per "step", the disk's floor at the
  same moments.

Restate and DBOS are installed on first use under ``.cache/peers`` (ignored by git; nothing
of theirs is part of this repository): ``npm`` and ``pip`` must reach their registries once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions"), str(ROOT / "bench")]

from alternate import record  # noqa: E402  # pyright: ignore[reportMissingImports]
from tests import procs  # noqa: E402

CACHE = ROOT / ".cache" / "peers"
RESTATE_VERSION, RESTATE_SDK_VERSION, DBOS_VERSION = "1.7.12", "1.17.2", "3.4.0"

# The Restate service: our code, run with their SDK. (Node 20 lacks Promise.withResolvers,
# which that SDK release calls.)
RESTATE_SERVICE = """
if (!Promise.withResolvers) {
  Promise.withResolvers = function () {
    let resolve, reject;
    const promise = new Promise((a, b) => { resolve = a; reject = b; });
    return { promise, resolve, reject };
  };
}
const http2 = require("node:http2");
const restate = require("@restatedev/restate-sdk");
const bench = restate.service({
  name: "bench",
  handlers: {
    steps: async (ctx, n) => {
      for (let i = 0; i < n; i++) {
        await ctx.run("noop", async () => i);
      }
      return n;
    },
  },
});
http2.createServer(restate.endpoint().bind(bench).http2Handler())
  .listen(parseInt(process.env.PORT, 10), "127.0.0.1");
"""

# The DBOS worker: reads a step count per line, answers the seconds the workflow took.
DBOS_WORKER = """
import sys, time
from dbos import DBOS
DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{sys.argv[1]}",
              "run_admin_server": False})

@DBOS.step()
def noop(i: int) -> int:
    return i

@DBOS.workflow()
def steps(n: int) -> int:
    for i in range(n):
        noop(i)
    return n

DBOS.launch()
print("ready", flush=True)
for line in sys.stdin:
    t = time.perf_counter()
    steps(int(line))
    print(time.perf_counter() - t, flush=True)
DBOS.destroy()
"""


def _install_restate() -> Path:
    where = CACHE / "restate"
    server = where / "node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
    if not server.exists():
        where.mkdir(parents=True, exist_ok=True)
        packages = [
            f"@restatedev/restate-server@{RESTATE_VERSION}",
            f"@restatedev/restate-sdk@{RESTATE_SDK_VERSION}",
        ]
        subprocess.run(["npm", "init", "-y"], cwd=where, check=True, capture_output=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", *packages],
            cwd=where,
            check=True,
        )
    (where / "service.cjs").write_text(RESTATE_SERVICE)
    return server


def _install_dbos() -> Path:
    python = CACHE / "dbos-venv" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(python.parents[1])], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"dbos=={DBOS_VERSION}"], check=True
        )
    return python


def _post(url: str, body: Any, timeout: float = 60) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read() or b"null")


@contextlib.contextmanager
def restate(scratch: Path) -> Generator[Callable[[int], float]]:
    """A Restate server and the service, on loopback; yields ``call(n) -> seconds``."""
    server = _install_restate()
    ingress, admin, node, service = (procs.free_port() for _ in range(4))
    env = {
        **os.environ,
        "RESTATE_LISTEN_MODE": "tcp",
        "RESTATE_BIND_ADDRESS": f"127.0.0.1:{node}",
        "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{node}/",
        "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ingress}",
        "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin}",
        "RESTATE_DISABLE_TELEMETRY": "true",
        "RESTATE_DEFAULT_NUM_PARTITIONS": "2",
        "RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE": "512MiB",
        "DO_NOT_TRACK": "1",
    }
    argv = [str(server), "--no-logo", "--base-dir", str(scratch / "restate-data")]
    log = open(scratch / "restate.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    svc = subprocess.Popen(
        ["node", "service.cjs"],
        cwd=server.parents[4],
        env={**os.environ, "PORT": str(service)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deployments = f"http://127.0.0.1:{admin}/deployments"
        _until(lambda: _post(deployments, {"uri": f"http://127.0.0.1:{service}"}))
        url = f"http://127.0.0.1:{ingress}/bench/steps"
        _until(lambda: _post(url, 0))

        def call(n: int) -> float:
            t = time.perf_counter()
            assert _post(url, n) == n
            return time.perf_counter() - t

        yield call
    finally:
        for p in (svc, proc):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        log.close()


def _until(probe: Callable[[], Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            probe()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@contextlib.contextmanager
def dbos(scratch: Path) -> Generator[Callable[[int], float]]:
    """A DBOS worker process on a SQLite system database; yields ``call(n) -> seconds``."""
    python = _install_dbos()
    proc = subprocess.Popen(
        [str(python), "-c", DBOS_WORKER, str(scratch / "dbos.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    assert stdout.readline().strip() == "ready"

    def call(n: int) -> float:
        stdin.write(f"{n}\n")
        stdin.flush()
        return float(stdout.readline())

    try:
        yield call
    finally:
        stdin.close()
        proc.wait(timeout=60)


def loom(scratch: Path, durability: str) -> Callable[[int], float]:
    """Loom's runtime in this process on a fresh ``sqlite:///`` store."""
    from core import steps_app  # pyright: ignore[reportMissingImports]
    from loom.config import open_store
    from loom.runtime import Runtime

    runtime = Runtime(steps_app(durability), open_store(f"sqlite:///{scratch / durability}.db"))
    count = [0]

    def call(n: int) -> float:
        count[0] += 1
        t = time.perf_counter()
        asyncio.run(runtime.start("steps", n, execution_id=f"p{count[0]}"))
        return time.perf_counter() - t

    return call


def bare_commit(scratch: Path) -> Callable[[int], float]:
    """The disk's floor in the same turns: ``n`` one-row SQLite commits (WAL, FULL) that
    overwrite a grown WAL."""
    con = sqlite3.connect(scratch / "bare.db", isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    con.execute("INSERT INTO t VALUES (1, '')")

    def call(n: int) -> float:
        t = time.perf_counter()
        for i in range(n):
            con.execute("BEGIN IMMEDIATE")
            con.execute("UPDATE t SET v=? WHERE k=1", (f"{time.perf_counter_ns()}:{i}",))
            con.execute("COMMIT")
        return time.perf_counter() - t

    call(1500)  # grown past a checkpoint: commits overwrite from then on
    return call


def marginal(calls: dict[str, Callable[[int], float]], steps: int, pairs: int) -> dict[str, float]:
    """Milliseconds per step of each system: medians of ``n``-step and empty calls. The
    systems take turns call by call, so each faces the disk of the same moment."""
    full: dict[str, list[float]] = {name: [] for name in calls}
    empty: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(pairs):
        for name, call in calls.items():
            empty[name].append(call(0))
            full[name].append(call(steps))
    return {
        name: (statistics.median(full[name]) - statistics.median(empty[name])) / steps * 1000
        for name in calls
    }


def run(rounds: int, steps: int, pairs: int) -> dict[str, Any]:
    """Every system per round, in a rotating order; medians and per-round ratios."""
    scratch = Path(tempfile.mkdtemp(prefix="loom-peers-"))
    with restate(scratch) as restate_call, dbos(scratch) as dbos_call:
        systems = {
            "Loom strict": loom(scratch, "strict"),
            "Loom batched": loom(scratch, "batched"),
            "Restate": restate_call,
            "DBOS": dbos_call,
            "SQLite commit alone": bare_commit(scratch),
        }
        marginal(systems, steps, 1)  # warm-up: imports, connections, first files
        names = list(systems)
        per: dict[str, list[float]] = {name: [] for name in names}
        loads: list[float] = []
        for r in range(rounds):
            loads.append(os.getloadavg()[0])
            order = names[r % len(names) :] + names[: r % len(names)]
            got = marginal({name: systems[name] for name in order}, steps, pairs)
            for name, ms in got.items():
                per[name].append(ms)
            print(f"round {r + 1}/{rounds}: load {loads[-1]:.1f} {got}", file=sys.stderr)
    shutil.rmtree(scratch, ignore_errors=True)
    strict = per["Loom strict"]
    return {
        "ms_per_step": {name: statistics.median(v) for name, v in per.items()},
        "over_loom_strict": {
            name: statistics.median(a / b for a, b in zip(v, strict, strict=True))
            for name, v in per.items()
        },
        "load": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
    }


def markdown(result: dict[str, Any], rounds: int, steps: int, pairs: int) -> str:
    """A dated section for ``RESULTS.md``."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = result["load"]
    lines = [
        f"### Sequential durable step beside Restate and DBOS, {when}",
        "",
        f"`python bench/peers.py --rounds {rounds} --steps {steps} --pairs {pairs}` on "
        f"{platform.machine()} ({os.cpu_count()} cores), Python {platform.python_version()}; "
        f"Restate {RESTATE_VERSION} (TypeScript SDK {RESTATE_SDK_VERSION}, Node "
        f"{_node_version()}), DBOS {DBOS_VERSION} on SQLite. Load average (1 min) over the "
        f"rounds: {load['min']:.1f} to {load['max']:.1f} (median {load['median']:.1f}).",
        "",
        "| system | ms per step (median of rounds) | / Loom strict (median of per-round ratios) |",
        "|---|---:|---:|",
    ]
    for name, ms in result["ms_per_step"].items():
        lines.append(f"| {name} | {ms:.3f} | {result['over_loom_strict'][name]:.2f}x |")
    return "\n".join(lines) + "\n"


def _node_version() -> str:
    done = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="add the table to RESULTS.md")
    args = parser.parse_args()
    result = run(args.rounds, args.steps, args.pairs)
    print(json.dumps(result, indent=2))
    section = markdown(result, args.rounds, args.steps, args.pairs)
    print(section)
    if args.record:
        record(section)


if __name__ == "__main__":
    main()
