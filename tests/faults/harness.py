"""Real faults for the fault suite: small file systems, read-only mounts, a lock-holding
process, a served worker and a ledger of effect invocations.

Disk full is a size-limited tmpfs filled to the last block; read-only is a read-only bind
mount; a locked database is a second OS process in ``BEGIN IMMEDIATE``. Mounting needs root
(``CAP_SYS_ADMIN``): without it the tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import procs

APP_REF = "tests.faults.fault_app:app"
ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 20.0  # seconds a caller may wait for any answer, fault or not


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True, timeout=30)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A size-limited tmpfs at ``path``, unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    try:
        yield path
    finally:
        _umount(path)


def resize(path: Path, size: str) -> None:
    """Grow (or shrink) a mounted tmpfs: the fault clears without touching open files."""
    _mount("-o", f"remount,size={size}", str(path))


@contextlib.contextmanager
def read_only_view(source: Path, target: Path) -> Iterator[Path]:
    """``source`` seen read-only at ``target`` (a read-only bind mount)."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        _mount("--bind", str(source), str(target))
        _mount("-o", "remount,bind,ro", str(target))
    except (subprocess.CalledProcessError, OSError) as exc:
        _umount(target)
        pytest.skip(f"cannot bind-mount read-only here (needs root): {exc}")
    try:
        yield target
    finally:
        _umount(target)


def make_writable(target: Path) -> None:
    """Clear a read-only bind mount's fault in place."""
    _mount("-o", "remount,bind,rw", str(target))


def fill(directory: Path) -> Path:
    """Write a file until its file system has no free block left; return it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for chunk in (65536, 512, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * chunk):
                    pass
    finally:
        os.close(fd)
    return filler


def fill_with_wal(directory: Path, db: Path) -> Path:
    """:func:`fill`, then use up the room the SQLite store keeps allocated in its WAL.

    The store preallocates its WAL (docs/adr/0085), so on a full disk its commits still
    overwrite that room; the disk is full for the store only once the WAL must grow. A
    second connection writes ballast rows until a commit fails for want of space (a
    checkpoint cannot move them into the database file, which cannot grow either).
    """
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("CREATE TABLE IF NOT EXISTS ballast (b BLOB)")
        filler = fill(directory)
        with contextlib.suppress(sqlite3.OperationalError):  # "database or disk is full"
            for _ in range(4096):
                con.execute("INSERT INTO ballast VALUES (zeroblob(4000))")
        # Then one page a commit, until not even that fits: a store commit needs a block too.
        with contextlib.suppress(sqlite3.OperationalError):
            for n in range(4096):
                con.execute("UPDATE ballast SET b = zeroblob(?) WHERE rowid = 1", (3000 + n % 2,))
    finally:
        con.close()
    return filler


@contextlib.contextmanager
def lock_holder(db: Path) -> Iterator[subprocess.Popen[str]]:
    """A second OS process holding the database's write lock until it is stopped."""
    code = (
        "import sqlite3, sys, time\n"
        f"con = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "con.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


@dataclass
class Answer:
    """One HTTP answer and how long it took."""

    status: int
    body: Any
    headers: dict[str, str]
    seconds: float


def call(base: str, method: str, path: str, body: Any = None, timeout: float = DEADLINE) -> Answer:
    """One JSON request; an answer of any status is returned, never raised."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw, headers = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        status, raw, headers = err.code, err.read(), dict(err.headers)
    return Answer(status, json.loads(raw or b"null"), headers, time.monotonic() - started)


class Ledger:
    """The side file the effects append ``key attempt`` lines to."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def keys(self) -> list[str]:
        """The idempotency key of every invocation, in order."""
        if not self.path.exists():
            return []
        return [line.split()[0] for line in self.path.read_text().splitlines() if line]


class Gates:
    """Where an effect says it ran and waits to be let go (see ``fault_app``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def wait_ran(self, key: str, timeout: float = DEADLINE) -> None:
        """Block until the effect with ``key`` has run."""
        flag = self.path / f"{key.replace(':', '_')}.ran"
        deadline = time.monotonic() + timeout
        while not flag.exists():
            assert time.monotonic() < deadline, f"effect {key} never ran"
            time.sleep(0.02)

    def release(self, key: str) -> None:
        """Let the effect with ``key`` return."""
        (self.path / f"{key.replace(':', '_')}.go").touch()


def env_for(tmp: Path, store: str, **extra: str) -> dict[str, str]:
    """The environment of a worker or CLI process under test."""
    return {
        **procs.OFFLINE_ENV,
        "LOOM_APP": APP_REF,
        "LOOM_STORE": store,
        "LOOM_TEST_SIDE_FILE": str(tmp / "ledger.txt"),
        "LOOM_TEST_GATE_DIR": str(tmp / "gates"),
        "LOOM_LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


@contextlib.contextmanager
def served(tmp: Path, env: dict[str, str], name: str = "serve") -> Iterator[str]:
    """``loom serve`` in its own process; yields its base URL."""
    port = procs.free_port()
    argv = [sys.executable, "-m", "loom", "serve", "--port", str(port)]
    with procs.running(
        f"loom-{name}", argv, port=port, log_path=tmp / f"{name}.log", ready_path="/live", env=env
    ) as server:
        yield f"http://{server.host}"


def cli(
    env: dict[str, str], *args: str, timeout: float = DEADLINE
) -> subprocess.CompletedProcess[str]:
    """Run the ``loom`` CLI in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "loom", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
