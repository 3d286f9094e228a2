"""The deployment guide (docs/operations/deploy.md) names only variables, outputs and
substitutions that exist."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import REPO_ROOT, TerraformDir

DEPLOY_DOC = REPO_ROOT / "docs" / "operations" / "deploy.md"


def deploy_doc() -> str:
    """The deployment guide, whole."""
    return DEPLOY_DOC.read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^#+ [^\n]*{re.escape(heading)}[^\n]*\n(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


def _table_names(text: str, header: str) -> list[str]:
    """First-column names of the markdown table whose header starts with ``header``."""
    names: list[str] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith(f"| {header} |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        if in_table and not line.startswith("|---"):
            names += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    return names


def doc_problems(text: str, example: TerraformDir, substitutions: dict[str, str]) -> list[str]:
    problems: list[str] = []
    outputs = set(re.findall(r"output -raw ([a-z_]+)", text)) | set(_table_names(text, "output"))
    for name in sorted(outputs - set(example.outputs)):
        problems.append(f"output {name} is not an output of the example environment")
    variables = set(_table_names(text, "variable"))
    for name in sorted(variables - set(example.variables)):
        problems.append(f"variable {name} is not a variable of the example environment")
    for name in sorted(set(re.findall(r"\b(_[A-Z_]+)=", text)) - set(substitutions)):
        problems.append(f"substitution {name} is not in cloudbuild.yaml")
    if not variables or not outputs:
        problems.append("the variable and output tables are missing")
    return problems


@pytest.fixture(scope="module")
def example() -> TerraformDir:
    return tm.load_dir(tm.EXAMPLE_DIR)


@pytest.fixture(scope="module")
def substitutions() -> dict[str, str]:
    config = yaml.safe_load((REPO_ROOT / "cloudbuild.yaml").read_text(encoding="utf-8"))
    return config["substitutions"]


def test_doc_names_match_terraform_and_cloudbuild(
    example: TerraformDir, substitutions: dict[str, str]
) -> None:
    assert doc_problems(deploy_doc(), example, substitutions) == []


def test_every_example_variable_is_documented(example: TerraformDir) -> None:
    assert set(_table_names(deploy_doc(), "variable")) == set(example.variables)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("output -raw worker_url", "output -raw worker_uri", "output worker_uri"),
        ("| `max_instance_count` |", "| `max_instances` |", "variable max_instances"),
        ("_REGION=$REGION", "_LOCATION=$REGION", "substitution _LOCATION"),
    ],
)
def test_doc_checker_catches(
    old: str, new: str, expected: str, example: TerraformDir, substitutions: dict[str, str]
) -> None:
    text = deploy_doc()
    assert old in text
    problems = doc_problems(text.replace(old, new), example, substitutions)
    assert any(expected in p for p in problems), problems


def test_doc_has_the_deploy_sections() -> None:
    text = deploy_doc()
    assert "Deploy to Google Cloud" in text
    for heading in ("Prerequisites", "Call the private worker", "Tear down"):
        assert _section(text, heading).strip()
    assert "bench/RESULTS.md" in _section(text, "Cost")
    assert "Authorization: Bearer $TOKEN" in text and "gcloud auth print-identity-token" in text
    for command in (
        "terraform init",
        "terraform plan -var-file=",
        "terraform apply",
        "terraform destroy",
    ):
        assert command in text
