"""Small helpers to run local servers (emulators) from tests: one PID each, always reaped.

Each server is started directly (not through a wrapper script) so the PID we hold is the
process that owns the port; stopping it is SIGTERM, then SIGKILL after a timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1

# Keep Google client libraries on loopback: no metadata-server credential lookups.
OFFLINE_ENV = {
    "GCE_METADATA_HOST": f"{LOOPBACK}:9",
    "GCE_METADATA_IP": f"{LOOPBACK}:9",
    "GOOGLE_CLOUD_PROJECT": "loom-test",
}


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL it if the test process dies without cleaning up.

    Fixture teardown stops servers normally; this covers a test process that is itself
    killed (SIGKILL, OOM), which would otherwise leave a JVM holding a port.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A started server process.

    Attributes:
        name: For messages.
        proc: The process (its PID is the one we kill).
        port: The loopback port it serves on.
        log_path: Where its stdout and stderr go.
    """

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"{LOOPBACK}:{self.port}"

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log, for failure messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def start(
    name: str,
    argv: Sequence[str],
    *,
    port: int,
    log_path: Path,
    env: Mapping[str, str] | None = None,
) -> Server:
    """Start ``argv`` in its own session, its output going to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            # Its own session: a Ctrl-C in the terminal reaches pytest, which then stops
            # the server in order, instead of killing it mid-test.
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    return Server(name, proc, port, log_path)


def wait_http_ready(server: Server, path: str = "/", *, timeout: float = 30.0) -> None:
    """Poll ``GET http://127.0.0.1:PORT{path}`` until it answers 200.

    Raises:
        RuntimeError: The process exited, or did not answer in time (its log is included).
    """
    url = f"http://{server.host}{path}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with {server.proc.returncode}:\n{server.log_tail()}"
            )
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(url, timeout=1.0) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{server.name} not ready after {timeout}s:\n{server.log_tail()}")


def wait_log(server: Server, text: str, *, timeout: float = 30.0) -> None:
    """Poll the server's log until it holds ``text``.

    Raises:
        RuntimeError: The process exited, or ``text`` did not appear in time.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in server.log_tail(chars=1_000_000):
            return
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with {server.proc.returncode}:\n{server.log_tail()}"
            )
        time.sleep(0.05)
    raise RuntimeError(f"{server.name} never logged {text!r}:\n{server.log_tail()}")


def stop(server: Server, *, timeout: float = 10.0) -> None:
    """SIGTERM the server's PID, then SIGKILL if it is still there after ``timeout``."""
    proc = server.proc
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


@contextlib.contextmanager
def running(
    name: str,
    argv: Sequence[str],
    *,
    port: int,
    log_path: Path,
    ready_path: str = "/",
    ready_timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """Start a server, wait until it answers HTTP 200 on ``ready_path``, always stop it."""
    server = start(name, argv, port=port, log_path=log_path, env=env)
    try:
        wait_http_ready(server, ready_path, timeout=ready_timeout)
        yield server
    finally:
        stop(server)
