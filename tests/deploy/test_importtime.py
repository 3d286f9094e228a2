"""bench/importtime.py: parsing of ``-X importtime`` output and the JSON line it prints."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType

import pytest

from tests.deploy.terraform_model import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "importtime.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_importtime", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


importtime = _load()

SAMPLE = """\
import time: self [us] | cumulative | imported package
import time:       150 |        150 |   _io
import time:      2493 |      37880 | site
import time:       300 |        300 |         json.decoder
import time:       120 |        120 |       json.scanner
import time:       400 |        800 |     json
import time:       900 |       5123 | main
"""


def test_parses_the_top_level_cumulative_time() -> None:
    assert importtime.cumulative_import_us(SAMPLE, "main") == 5123
    assert importtime.cumulative_import_us(SAMPLE, "site") == 37880


def test_ignores_nested_imports_of_the_same_name() -> None:
    # json appears only as a nested import here: it is not the measured top-level import.
    with pytest.raises(ValueError, match="no top-level import"):
        importtime.cumulative_import_us(SAMPLE, "json")


def test_real_importtime_output_of_json() -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import json"],
        capture_output=True,
        text=True,
        check=True,
    )
    micros = importtime.cumulative_import_us(result.stderr, "json")
    assert 0 < micros < 5_000_000
    # The cumulative time covers json's own submodules.
    decoder = [line for line in result.stderr.splitlines() if line.endswith("json.decoder")]
    assert decoder and micros >= int(decoder[0].split("|")[1])


def test_script_prints_one_json_line() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--module", "json", "--runs", "3"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    payload = json.loads(lines[0])
    assert set(payload) == {"json_import_s"}
    assert 0 < payload["json_import_s"] < 5


def test_script_fails_clearly_when_the_module_does_not_import() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--module", "no_such_module_xyz", "--runs", "1"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert "No module named 'no_such_module_xyz'" in result.stderr
