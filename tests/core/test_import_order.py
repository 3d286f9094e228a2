"""Every module a user may import names first imports on its own, in a fresh interpreter.

The engine's modules import each other in cycles that resolve only in some orders (the fold
imports the primitives that register its handlers, and they import session-side modules).
A module that worked when ``loom`` had already loaded the rest once failed when it was the
first import of a process: ``import loom.kernel.effects`` raised ``ImportError`` (a cycle through
``loom.kernel.limits``). Each module here runs in its own interpreter, so no earlier import in this
test process hides a broken order.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"

# The import paths the README and the docs show, and the engine modules an app's tests or
# plugins reach for (effects, events, payloads, errors).
MODULES = [
    "loom",
    "loom.app",
    "loom.commission",
    "loom.kernel.context",
    "loom.kernel.effects",
    "loom.errors",
    "loom.events",
    "loom.examples.orders",
    "loom.kernel.fold",
    "loom.grants",
    "loom.kernel.payloads",
    "loom.plugins.a2ui",
    "loom.runtime",
    "loom.kernel.session",
    "loom.kernel.state",
    "loom.store",
    "loom.store.sqlite",
    "loom.testing",
    "loom.wire",
]


def test_each_public_module_imports_first() -> None:
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", f"import {name}"],
            cwd=FUNCTIONS,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in MODULES
    }
    failed: dict[str, str] = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            failed[name] = (
                err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
            )
    assert failed == {}
