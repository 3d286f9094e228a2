"""When a claim in the log still means someone is running the execution.

A claim is live until its ``until`` passes. On this machine we can do better than wait: a
holder is ``machine:pid:n``, so a claim by a process of this machine that no longer exists
(or is a zombie) is expired at once (``loom execute`` right after a crash proceeds), and a
claim by this very process is live only while that ``execute`` call is still running.

``machine`` is the hostname qualified by the kernel's boot id: containers (Cloud Run
instances) can share a hostname and small pids, and must never mistake each other's live
claims for their own finished ones.
"""

from __future__ import annotations

import itertools
import os
import socket
import uuid
from pathlib import Path
from typing import Any


def _machine() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = uuid.uuid4().hex[:8]  # no boot id: only this process will ever match
    return f"{socket.gethostname().replace(':', '-')}-{boot}"


HOST = _machine()

ACTIVE_HOLDERS: set[str] = set()
"""Holders of this process whose ``execute`` call is running (shared by every runtime)."""

_holders = itertools.count(1)

# ``machine:pid:`` taken once, not per execute call (``os.getpid`` is a system call each
# time), and again in a forked child, which has a pid of its own.
_prefix = f"{HOST}:{os.getpid()}:"


def _forked() -> None:
    global _prefix
    _prefix = f"{HOST}:{os.getpid()}:"


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_forked)


def new_holder() -> str:
    """A holder name for one ``execute`` call of this process: ``machine:pid:n``."""
    return f"{_prefix}{next(_holders)}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:  # a killed process nobody has reaped yet still answers kill(0)
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
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
