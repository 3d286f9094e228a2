"""What the crash tests share: a store URL a child process can open too, and ``loom`` run in
a child process that may SIGKILL itself at a crash point."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def invocations_per_step(side: Path, eid: str) -> dict[str, int]:
    """Invocations by step id; every line must carry this execution's key for that step."""
    lines = side.read_text().splitlines() if side.exists() else []
    keys = [line.split()[0] for line in lines]
    assert all(k.startswith(f"{eid}:") for k in keys), keys
    return dict(Counter(k.rsplit(":", 1)[1] for k in keys))


def assert_each_outcome_once(events: Sequence[Any]) -> None:
    """The recovered log has no gap and records each step's outcome once."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "log has a gap"
    outcomes = Counter(e.step_id for e in events if e.type in ("EffectCompleted", "EffectFailed"))
    assert all(n == 1 for n in outcomes.values()), f"a step recorded twice: {outcomes}"
