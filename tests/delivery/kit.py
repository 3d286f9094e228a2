"""What the crash tests share: a store URL a child process can open too, and ``loom`` run in
a child process that may SIGKILL itself at a crash point."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def store_url(request: pytest.FixtureRequest, tmp_path: Path, prefix: str) -> str:
    """``request.param``'s store ("sqlite" or "firestore"), fresh for this test."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/loom.db"
    request.getfixturevalue("firestore_emulator")  # sets FIRESTORE_EMULATOR_HOST
    return f"firestore://loom-test/{prefix}{uuid.uuid4().hex[:24]}"


def run_loom(
    app: str, db: str, side: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 60
) -> int:
    """Run ``loom ARGS`` for ``app`` on ``db`` in a child process; its exit code.

    ``side`` is the effects' ledger file; ``env`` adds variables (``LOOM_CRASH_AT``, ...).
    """
    full = {
        **os.environ,
        "LOOM_APP": app,
        "LOOM_STORE": db,
        "LOOM_TEST_SIDE_FILE": str(side),
        **(env or {}),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "loom", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode
