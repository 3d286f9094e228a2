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


def _prereqs(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``.ci/prereqs`` on a PATH that holds python and nothing else."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "python").symlink_to(sys.executable)
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
