"""The README's first flow snippet and its command-line block run as shown.

Each command of the CLI block runs in a fresh directory (its own ``.loom`` store) with
the repository importable; a command followed by a ``# output`` line must print a line
starting with the same id and status, and only the ``--strict`` typo may exit non-zero.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(fence: str, marker: str) -> str:
    blocks = re.findall(rf"```{fence}\n(.*?)```", README, re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"one {fence} block with {marker!r} expected"
    return found[0]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "LOOM_APP": ""}


def test_the_first_complete_flow_runs(tmp_path: Path) -> None:
    code = _block("python", 'Loom("hello")')
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "completed hello ada"


def _commands(block: str) -> list[tuple[str, str | None]]:
    """``(command, expected output line or None)`` pairs, continuation lines joined."""
    lines = block.replace("\\\n", " ").splitlines()
    pairs: list[tuple[str, str | None]] = []
    for line in lines:
        if line.startswith("# "):
            command, _ = pairs[-1]
            pairs[-1] = (command, line[2:])
        elif line.strip():
            pairs.append((re.sub(r"\s+#.*$", "", line), None))
    return pairs


@pytest.mark.slow
def test_the_command_line_block_runs_as_shown(tmp_path: Path) -> None:
    block = _block("bash", "loom start order.fulfil --id cli-1")
    env = _env()
    for command, expected in _commands(block):
        if command.startswith("export "):
            name, _, value = command.removeprefix("export ").partition("=")
            env[name] = value
            continue
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        strict = "--strict" in command
        assert done.returncode == (2 if strict else 0), (command, done.stdout, done.stderr)
        if expected is not None:
            shown = (done.stderr if strict else done.stdout).strip()
            assert shown.split()[:2] == expected.split()[:2], (command, shown, expected)
