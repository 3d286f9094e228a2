"""The module's variable validations, evaluated by terraform itself, offline.

``terraform plan`` of a directory holding only the module's ``variables.tf`` needs no
provider, so every validation runs for real; the module's other files are checked for what
a brand-new project needs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy import terraform_model as tm

REQUIRED = {"project_id": "my-project", "region": "europe-west1", "loom_app": "app.main:app"}


def _plan(tmp_path: Path, **values: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed")
    shutil.copy(tm.MODULE_DIR / "variables.tf", tmp_path / "variables.tf")
    args = [f"-var={key}={value}" for key, value in {**REQUIRED, **values}.items()]
    return subprocess.run(
        ["terraform", "plan", "-input=false", "-no-color", "-lock=false", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "TF_IN_AUTOMATION": "1"},
        check=False,
    )


def test_defaults_pass_every_validation(tmp_path: Path) -> None:
    result = _plan(tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("project_id", "prefix", "ok"),
    [
        ("a" * 30, "b" * 18, True),  # 30 + 1 + 18 + 14 = 63: the longest bucket name allowed
        ("a" * 30, "b" * 19, False),  # 64
        ("a" * 30, "b" * 21, False),  # both at their own maximum: 66
        ("my-project", "loom", True),
    ],
)
def test_bucket_names_stay_within_63_characters(
    tmp_path: Path, project_id: str, prefix: str, ok: bool
) -> None:
    result = _plan(tmp_path, project_id=project_id, name_prefix=prefix)
    assert (result.returncode == 0) == ok, result.stderr
    if not ok:
        assert "may not exceed 63" in result.stderr


def test_the_longest_bucket_suffix_is_the_one_validated() -> None:
    module = tm.load_dir(tm.MODULE_DIR)
    names = [str(b["name"]) for b in module.of_type("google_storage_bucket").values()]
    suffixes = [name.split("${var.name_prefix}", 1)[1] for name in names]
    validations = tm.blocks(module.variables["name_prefix"], "validation")
    conditions = " ".join(str(v["condition"]) for v in validations)
    assert max(suffixes, key=len) in conditions, (suffixes, conditions)
    assert all(name.startswith("${var.project_id}-${var.name_prefix}") for name in names)


def test_a_brand_new_project_gets_the_apis_terraform_itself_needs() -> None:
    module = tm.load_dir(tm.MODULE_DIR)
    apis = set(re.findall(r'"([a-z]+\.googleapis\.com)"', str(module.locals["apis"])))
    assert "run.googleapis.com" in apis  # the parse found the list
    assert {"cloudresourcemanager.googleapis.com", "serviceusage.googleapis.com"} <= apis
    # Reading the project (its number builds the tasks URL) waits for the APIs.
    project = module.data["google_project"]["this"]
    assert "google_project_service.apis" in str(project.get("depends_on"))
