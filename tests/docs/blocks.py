"""Reading the code blocks of the documentation (the README and the pages under ``docs/``),
and running them as a reader would.

A block is found by its page and a piece of its text (its *marker*), never by its position,
so moving prose around a block does not silently point a test at another one. A block no
test can run says why in an HTML comment right before it: ``<!-- not run: ... -->``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$", re.S)
_FENCE = re.compile(r"^( *)```([\w-]*)[^\n]*\n(.*?)^\1```", re.M | re.S)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str  # relative to the repository root
    lang: str
    code: str
    reason: str | None  # why no test runs it (the comment before it), if it says so


@dataclass(frozen=True)
class Ref:
    """A block a test runs: its page and a piece of its text only it holds."""

    page: str
    marker: str


def pages() -> list[str]:
    """Every page whose blocks must be run or say why not (the decision records are a
    history, not instructions)."""
    found = ["README.md"]
    for path in sorted((ROOT / "docs").rglob("*.md")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("docs/adr/"):
            found.append(rel)
    return found


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page``, in order (indented ones, inside list items, too)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found: list[Block] = []
    for match in _FENCE.finditer(text):
        indent, lang, code = match.group(1), match.group(2), match.group(3)
        code = "\n".join(line.removeprefix(indent) for line in code.splitlines()) + "\n"
        before = text[: match.start()].rstrip()
        comment = before[before.rfind("<!--") :] if before.endswith("-->") else ""
        reason = NOT_RUN.match(comment)
        found.append(Block(page, lang, code, reason.group(1) if reason else None))
    return found


def block(ref: Ref) -> Block:
    """The one block of ``ref.page`` holding ``ref.marker``."""
    found = [b for b in blocks(ref.page) if ref.marker in b.code]
    assert len(found) == 1, f"{ref.page}: {len(found)} blocks hold {ref.marker!r}"
    return found[0]


def env(**extra: str) -> dict[str, str]:
    """The environment a reader's shell has: the checkout importable (for ``examples``), the
    installed ``loom`` first on PATH, no LOOM_* setting of the test process."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    # `loom` is the command of the environment running the tests, wherever PATH pointed.
    path = os.pathsep.join([str(Path(sys.executable).parent), base.get("PATH", "")])
    return {**base, "PATH": path, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **extra}


def run_python(ref: Ref, cwd: Path) -> str:
    """Run a Python block as a script in ``cwd``; its standard output."""
    done = subprocess.run(
        [sys.executable, "-c", block(ref).code],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def commands(code: str) -> list[tuple[str, str | None]]:
    """``(command, the output line shown under it or None)``: continuation lines joined,
    trailing comments dropped, a ``# output`` line kept as the expected output."""
    pairs: list[tuple[str, str | None]] = []
    for line in code.replace("\\\n", " ").splitlines():
        if line.startswith("# "):
            if pairs:
                command, _ = pairs[-1]
                pairs[-1] = (command, line[2:])
        elif line.strip():
            pairs.append((re.sub(r"\s+#\s.*$", "", line), None))
    return pairs


def run_commands(
    ref: Ref, cwd: Path, shell_env: dict[str, str], stop_at: str | None = None
) -> list[str]:
    """Run a shell block command by command, as typed at a prompt: ``export`` lines change
    ``shell_env`` for the next ones; a command followed by a ``# output`` line must print a
    line starting with the same two words; only a command with ``--strict`` may fail (exit 2).
    ``stop_at``: stop before the first command starting with it (a server the test starts
    itself). The output of each command, in order."""
    outputs: list[str] = []
    for command, expected in commands(block(ref).code):
        if stop_at is not None and command.startswith(stop_at):
            break
        if command.startswith("export "):
            for assignment in command.removeprefix("export ").split():
                name, _, value = assignment.partition("=")
                shell_env[name] = value
            continue
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=shell_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        strict = "--strict" in command
        assert done.returncode == (2 if strict else 0), (command, done.stdout, done.stderr)
        shown = (done.stderr if strict else done.stdout).strip()
        if expected is not None:
            assert shown.split()[:2] == expected.split()[:2], (command, shown, expected)
        outputs.append(done.stdout)
    return outputs
