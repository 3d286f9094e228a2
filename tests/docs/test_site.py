"""The documentation site builds with ``mkdocs build --strict`` (what ``.ci/run`` runs): every
page in the navigation, every link resolving, the API reference read from the docstrings,
and every decision record listed by the build hook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT


@pytest.mark.slow
def test_the_site_builds_strictly_with_every_record(tmp_path: Path) -> None:
    if (
        shutil.which("mkdocs") is None
        and subprocess.run(
            [sys.executable, "-c", "import mkdocs, material, mkdocstrings"], check=False
        ).returncode
    ):
        pytest.skip("the docs extra is not installed: pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    records = sorted(p.stem for p in (ROOT / "docs" / "adr").glob("[0-9]*.md"))
    for record in records:
        assert (site / "adr" / record / "index.html").exists(), record
    index = (site / "adr" / "index.html").read_text(encoding="utf-8")
    assert all(f"{r}/" in index for r in records[-3:])  # in the navigation of the page
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "Runtime" in api and "LoomTestEnv" in api and "idempotent" in api
