"""Worker processes for the chaos runs: started, SIGKILLed at random and started again.

Each slot is one ``functions-framework --target worker`` process group (gunicorn forks the
process that serves: the whole group is killed, as a machine losing the instance would),
on a port of its own that it keeps across restarts. Every incarnation has an id
(``LOOM_CHAOS_INCARNATION``, also in the ledger lines its effects write) and the time it
was killed, so an effect cut short by a kill is known to have ended then.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests import procs

REPO = Path(__file__).resolve().parents[2]
MAIN = REPO / "functions" / "main.py"


# Run as the worker's first program: ask for SIGKILL when the thread that started it
# exits (so a test process killed leaves no workers behind), then become the worker. Done
# after the exec, not in a ``preexec_fn``: forking a process with gRPC's threads running
# and running Python in the child before its exec can hang or kill it.
_EXEC = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL); "  # PR_SET_PDEATHSIG
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@dataclass
class Slot:
    """One worker: its port, its current process and whether it answers ``/health``."""

    index: int
    port: int
    proc: subprocess.Popen[bytes] | None = None
    incarnation: str = ""
    ready: bool = False
    born: int = 0

    @property
    def url(self) -> str:
        return f"http://{procs.LOOPBACK}:{self.port}"


@dataclass
class Cluster:
    """``size`` worker slots over one environment (store, app, dispatch).

    Attributes:
        kills: ``incarnation -> epoch seconds`` of every SIGKILL.
        restarts: How many processes were started after a kill.
    """

    size: int
    env: Mapping[str, str]
    logs: Path
    seed: int = 0
    slots: list[Slot] = field(default_factory=list[Slot])
    kills: dict[str, float] = field(default_factory=dict[str, float])
    restarts: int = 0
    startups: list[float] = field(default_factory=list[float])

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)
        self._stop = threading.Event()
        self._killer: threading.Thread | None = None
        self.logs.mkdir(parents=True, exist_ok=True)
        self.slots = [Slot(i, procs.free_port()) for i in range(self.size)]
        # Every worker is started by one thread that lives as long as the cluster: Linux
        # kills a child whose parent *thread* exits (the death signal each worker asks
        # for, see ``_EXEC``), so workers started by the killer thread would die with it.
        self._spawns: queue.Queue[tuple[Slot, threading.Event] | None] = queue.Queue()
        self._spawner = threading.Thread(target=self._spawn_loop, daemon=True)
        self._spawner.start()

    def start(self, timeout: float = 60.0) -> None:
        """Start every slot and wait until each answers."""
        for slot in self.slots:
            self._spawn(slot)
        deadline = time.monotonic() + timeout
        while not all(s.ready for s in self.slots):
            if time.monotonic() > deadline:
                tails = [self._tail(s) for s in self.slots if not s.ready]
                raise RuntimeError(f"workers never became ready: {tails}")
            time.sleep(0.05)

    def up(self) -> list[str]:
        """Base URLs of the workers answering now."""
        with self._lock:
            return [s.url for s in self.slots if s.ready]

    def kill_every(self, low: float, high: float) -> None:
        """From now on, SIGKILL a random worker every ``low``-``high`` seconds, and start it
        again at once (until :meth:`calm`)."""
        self._stop.clear()
        self._killer = threading.Thread(target=self._kill_loop, args=(low, high), daemon=True)
        self._killer.start()

    def calm(self) -> None:
        """Stop killing; wait until every worker answers again."""
        self._stop.set()
        if self._killer is not None:
            self._killer.join()
        deadline = time.monotonic() + 60
        while not all(s.ready for s in self.slots) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop every worker (by process group)."""
        self._stop.set()
        if self._killer is not None:
            self._killer.join()
        for slot in self.slots:
            self._kill(slot, signal.SIGKILL, record=False)
        self._spawns.put(None)
        self._spawner.join()

    # -- inside -------------------------------------------------------------------------

    def _kill_loop(self, low: float, high: float) -> None:
        while not self._stop.wait(self._rng.uniform(low, high)):
            candidates = [s for s in self.slots if s.ready]
            if not candidates:
                continue
            slot = self._rng.choice(candidates)
            self._kill(slot, signal.SIGKILL, record=True)
            self.restarts += 1
            self._spawn(slot)

    def _kill(self, slot: Slot, sig: signal.Signals, *, record: bool) -> None:
        with self._lock:
            proc, slot.ready = slot.proc, False
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if record:
            self.kills[slot.incarnation] = time.time()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def _spawn(self, slot: Slot) -> None:
        done = threading.Event()
        self._spawns.put((slot, done))
        done.wait()

    def _spawn_loop(self) -> None:
        while (request := self._spawns.get()) is not None:
            slot, done = request
            try:
                self._start(slot)
            finally:
                done.set()

    def _start(self, slot: Slot) -> None:
        slot.born += 1
        incarnation = f"w{slot.index}.{slot.born}"
        argv = [
            sys.executable,
            "-m",
            "functions_framework",
            "--source",
            str(MAIN),
            "--target",
            "worker",
            "--host",
            procs.LOOPBACK,
            "--port",
            str(slot.port),
        ]
        env = {
            **os.environ,
            **procs.OFFLINE_ENV,
            "PYTHONPATH": str(REPO),
            **self.env,
            "LOOM_CHAOS_INCARNATION": incarnation,
        }
        log = (self.logs / f"{incarnation}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-c", _EXEC, *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # (its own group: a kill takes gunicorn's worker too)
        )
        log.close()
        with self._lock:
            slot.proc, slot.incarnation, slot.ready = proc, incarnation, False
        threading.Thread(target=self._await_ready, args=(slot, proc), daemon=True).start()

    def _await_ready(self, slot: Slot, proc: subprocess.Popen[bytes]) -> None:
        began = time.monotonic()
        while proc.poll() is None and slot.proc is proc:
            try:
                with urllib.request.urlopen(f"{slot.url}/health", timeout=1) as answer:
                    if answer.status == 200:
                        with self._lock:
                            slot.ready = slot.proc is proc
                        self.startups.append(time.monotonic() - began)
                        return
            except OSError:
                pass
            time.sleep(0.05)

    def _tail(self, slot: Slot) -> str:
        path = self.logs / f"{slot.incarnation}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""
