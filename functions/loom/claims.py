"""When a claim in the log still means someone is running the execution.

A claim is live until its ``until`` passes. On this machine we can do better than wait: a
holder is ``host:pid:n``, so a claim by a process of this host that no longer exists is
expired at once (``loom execute`` right after a crash proceeds), and a claim by this very
process is live only while that ``execute`` call is still running.
"""

from __future__ import annotations

import os
import socket
from typing import Any

HOST = socket.gethostname()

ACTIVE_HOLDERS: set[str] = set()
"""Holders of this process whose ``execute`` call is running (shared by every runtime)."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def claim_is_live(
    claim: dict[str, Any] | None, now: float, active: set[str] = ACTIVE_HOLDERS
) -> bool:
    """Whether ``claim`` (``{"holder", "until"}``) still holds at ``now``."""
    if claim is None or claim["until"] <= now:
        return False
    holder: str = claim["holder"]
    parts = holder.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != HOST or not parts[1].isdigit():
        return True  # another machine's holder: trust its lease
    pid = int(parts[1])
    if pid == os.getpid():
        return holder in active
    return pid_alive(pid)
