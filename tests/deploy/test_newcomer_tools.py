"""Tools a newcomer runs first: ``bash .ci/run`` on a machine that lacks the emulators, and
``bench/run.py --quick`` (a smoke run that must leave the recorded results alone)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _stub(bin_dir: Path, name: str, body: str) -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def _bin(tmp_path: Path, uid: int | None = None) -> Path:
    """A PATH directory holding python (and, with ``uid``, an ``id`` that answers it)."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "python").symlink_to(sys.executable)
    if uid is not None:
        _stub(bin_dir, "id", f'[ "$1" = -u ] && echo {uid} || /usr/bin/id "$@"')
    return bin_dir


def _prereqs(
    tmp_path: Path, uid: int | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``.ci/prereqs`` on a PATH that holds python and nothing else."""
    bin_dir = _bin(tmp_path, uid)
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run(
        [bash, str(ROOT / ".ci" / "prereqs")],
        env={"PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _apt_block() -> str:
    """The part of ``.ci/run`` that installs (or skips) the tools apt provides."""
    script = (ROOT / ".ci" / "run").read_text()
    return script[script.index("# Tools from apt") : script.index("# Its wheel pins")]


def _run_apt_block(tmp_path: Path, uid: int, apt: bool) -> subprocess.CompletedProcess[str]:
    bin_dir = _bin(tmp_path, uid)
    if apt:  # records what it was asked to install, installs nothing
        _stub(bin_dir, "apt-get", f'echo "$@" >> {tmp_path / "apt.log"}')
    code = _apt_block() + 'echo "CT=${LOOM_CONTAINER_TESTS:-} BT=${LOOM_BROWSER_TESTS:-}"\n'
    return subprocess.run(
        ["/bin/bash", "-c", code],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_ci_says_what_is_missing_and_how_to_install_it(tmp_path: Path) -> None:
    done = _prereqs(tmp_path)
    assert done.returncode == 1
    for needed in (
        "java",
        "gcloud",
        "terraform",
        "npm",
        "apt-get install",
        "LOOM_REQUIRE_EMULATORS=0",
    ):
        assert needed in done.stderr, done.stderr
    skipped = _prereqs(tmp_path, LOOM_REQUIRE_EMULATORS="0")
    assert skipped.returncode == 0 and "skipped" in skipped.stderr


def test_prereqs_lists_the_optional_tools_without_failing(tmp_path: Path) -> None:
    done = _prereqs(tmp_path, uid=1000, LOOM_REQUIRE_EMULATORS="0")
    assert done.returncode == 0, done.stderr
    optional = done.stderr.split("optional, their tests are skipped without them:")[1]
    for needed in (
        "podman",
        "runc",
        "mmdebstrap",
        "root",
        "tests/deploy/test_container.py",
        "LOOM_CONTAINER_TESTS=0",
        "chromium",
        "chromedriver",
        "tests/console/test_console_browser.py",
        "apt-get install -y chromium",
    ):
        assert needed in optional, (needed, done.stderr)  # fmt: skip


def test_a_normal_user_without_apt_is_told_what_is_skipped(tmp_path: Path) -> None:
    done = _run_apt_block(tmp_path, uid=1000, apt=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "CT=0 BT=0"
    assert "skipping tests/deploy/test_container.py" in done.stderr
    assert "sudo apt-get install -y podman runc mmdebstrap" in done.stderr
    assert "skipping tests/console/test_console_browser.py" in done.stderr
    assert "sudo apt-get install -y chromium chromium-driver" in done.stderr


def test_as_root_with_apt_nothing_changes(tmp_path: Path) -> None:
    """CI: the tools are installed with apt and the container test is asked for (a tool
    that still cannot be found then fails that test, as before)."""
    done = _run_apt_block(tmp_path, uid=0, apt=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "CT=1 BT="
    installs = (tmp_path / "apt.log").read_text()
    assert "install -y -qq podman runc mmdebstrap" in installs
    assert "install -y -qq chromium chromium-driver" in installs
    assert "skipping" not in done.stderr


def test_container_tests_can_still_be_turned_off(tmp_path: Path) -> None:
    bin_dir = _bin(tmp_path, 0)
    _stub(bin_dir, "apt-get", "exit 0")
    code = _apt_block() + 'echo "CT=${LOOM_CONTAINER_TESTS:-}"\n'
    done = subprocess.run(
        ["/bin/bash", "-c", code],
        env={"PATH": str(bin_dir), "LOOM_CONTAINER_TESTS": "0"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "CT=0"


def test_ci_checks_prerequisites_before_installing() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert script.index("bash .ci/prereqs") < script.index("pip install")


def test_bench_quick_leaves_the_recorded_results_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The benchmarks themselves are replaced by a stub (this checks what the script does
    with their figures, not the figures)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import run

    async def engine(quick: bool) -> dict[str, Any]:
        return {"quick": quick}

    results = ROOT / "bench" / "RESULTS.md"
    before = results.stat().st_mtime_ns, results.read_bytes()
    monkeypatch.setattr(run, "engine", engine)
    monkeypatch.setattr(run, "_sub", lambda *a: {"stub": True})
    monkeypatch.setattr(sys, "argv", ["run.py", "--quick", "--no-firestore"])
    run.main()
    assert '"quick": true' in capsys.readouterr().out
    assert (results.stat().st_mtime_ns, results.read_bytes()) == before
    assert os.access(results, os.R_OK)
