"""Pub/Sub pushes for the attack tests: the push body the subscription POSTs, signed or not,
and the ``events`` target as a real functions-framework process."""

from __future__ import annotations

import base64
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from loom.workers.auth import sign
from tests import procs
from tests.functions.conftest import MAIN, REPO, SECRET


def push(message: dict[str, Any], message_id: str, signature: str | None = None) -> dict[str, Any]:
    """The body a push subscription POSTs for ``message``."""
    raw = json.dumps(message).encode()
    attributes = {} if signature is None else {"loom-signature": signature}
    return {
        "message": {
            "data": base64.b64encode(raw).decode(),
            "attributes": attributes,
            "messageId": message_id,
        },
        "subscription": "projects/p/subscriptions/s",
    }


def signed_push(message: dict[str, Any], message_id: str, **kw: Any) -> dict[str, Any]:
    """:func:`push`, signed with the shared secret."""
    raw = json.dumps(message).encode()
    eid = str(message.get("execution_id") or "")
    return push(message, message_id, sign(SECRET, message["action"], eid, raw, **kw))


def start_events(env: dict[str, str], log_dir: Path) -> procs.Server:
    """``functions-framework --target events`` on loopback with ``env``; stop it with
    ``procs.stop``."""
    port = procs.free_port()
    argv = [sys.executable, "-m", "functions_framework", "--source", str(MAIN)]
    argv += ["--target", "events", "--signature-type", "cloudevent"]
    argv += ["--host", procs.LOOPBACK, "--port", str(port)]
    full = {**procs.OFFLINE_ENV, "PYTHONPATH": str(REPO), **env}
    server = procs.start("events", argv, port=port, log_path=log_dir / "events.log", env=full)
    deadline = time.monotonic() + 30
    while True:
        if server.proc.poll() is not None or time.monotonic() > deadline:
            procs.stop(server)
            raise RuntimeError(f"events target did not listen:\n{server.log_tail()}")
        with socket.socket() as sock:
            if sock.connect_ex((procs.LOOPBACK, port)) == 0:
                return server
        time.sleep(0.05)
