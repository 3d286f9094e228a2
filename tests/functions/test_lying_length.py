"""Requests that lie about their size: a declared ``Content-Length`` far over the limit gets
413 at once from every functions-framework target, without waiting for a body that never
comes.

The servers are real ``functions-framework`` processes on loopback; the requests go through
a raw socket so the lie reaches the server unchanged (an HTTP client would refuse to send a
body shorter than its declared length).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import procs
from tests.functions.conftest import MAIN, REPO

pytestmark = pytest.mark.slow

LIE = 100_000_000_000  # 100 GB declared
PATHS = {"worker": "/executions", "tasks": "/tasks/execute", "events": "/"}


def serve(target: str, env: dict[str, str], log_dir: Path) -> procs.Server:
    port = procs.free_port()
    argv = [
        sys.executable,
        "-m",
        "functions_framework",
        "--source",
        str(MAIN),
        "--target",
        target,
        "--host",
        procs.LOOPBACK,
        "--port",
        str(port),
    ]
    env = {**procs.OFFLINE_ENV, "PYTHONPATH": str(REPO), **env}
    server = procs.start(target, argv, port=port, log_path=log_dir / f"{target}.log", env=env)
    probe = "/health" if target != "events" else None
    try:
        if probe is None:
            wait_listening(server)
        else:
            procs.wait_http_ready(server, probe, timeout=30)
    except RuntimeError:
        procs.stop(server)
        raise
    return server


def wait_listening(server: procs.Server, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((procs.LOOPBACK, server.port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{server.name} never listened:\n{server.log_tail()}")


def lie(server: procs.Server, path: str, declared: int, body: bytes) -> tuple[int, Any, float]:
    """Send ``body`` under a false ``Content-Length``; the status, JSON body and seconds.

    Timed until the whole answer is in: the server must not wait for the rest of the
    declared body, which never comes.
    """
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {server.host}\r\n"
        "Content-Type: application/json\r\nce-id: 1\r\nce-source: s\r\n"
        "ce-type: google.cloud.pubsub.topic.v1.messagePublished\r\nce-specversion: 1.0\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    with socket.create_connection((procs.LOOPBACK, server.port), timeout=10) as sock:
        sock.sendall(head + body)
        data = b""
        while not complete(data) and (chunk := sock.recv(65536)):
            data += chunk
    elapsed = time.monotonic() - started
    header, _, rest = data.partition(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in header.lower():
        rest = dechunk(rest)
    return status, json.loads(rest), elapsed


def complete(data: bytes) -> bool:
    """Whether ``data`` holds a whole HTTP response (sized or chunked)."""
    header, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in header.lower().split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip() == b"content-length":
            return len(rest) >= int(value)
        if name.strip() == b"transfer-encoding" and b"chunked" in value:
            return rest.endswith(b"0\r\n\r\n")
    return False


def dechunk(raw: bytes) -> bytes:
    """The payload of a chunked HTTP body."""
    out = b""
    while raw:
        size_line, _, raw = raw.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, raw = out + raw[:size], raw[size + 2 :]
    return out


@pytest.fixture
def servers(tmp_path: Path, worker_env: dict[str, str]) -> Iterator[dict[str, procs.Server]]:
    env = {**worker_env, "LOOM_DISPATCH": "inline://"}
    started: dict[str, procs.Server] = {}
    try:
        for target in PATHS:
            started[target] = serve(target, env, tmp_path)
        yield started
    finally:
        for server in started.values():
            procs.stop(server)


def test_a_declared_length_over_the_limit_gets_413_at_once(
    servers: dict[str, procs.Server],
) -> None:
    for target, path in PATHS.items():
        status, body, elapsed = lie(servers[target], path, LIE, b'{"a": 1}')
        assert status == 413, (target, status, body)
        assert body["code"] == "too_large", (target, body)
        assert elapsed < 3.0, (target, elapsed)
