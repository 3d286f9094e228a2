"""The custom checkov policies in infra/checkov are well-formed and each has a failing fixture.

checkov itself runs in its own virtualenv through infra/scripts/checkov.sh (called by
infra/scripts/offline_checks.sh), which also proves on infra/checkov/fixtures/bad that
every policy fails there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import REPO_ROOT

POLICY_DIR = REPO_ROOT / "infra" / "checkov"
BAD_FIXTURE = POLICY_DIR / "fixtures" / "bad"
SCRIPT = REPO_ROOT / "infra" / "scripts" / "checkov.sh"


def _policies() -> dict[Path, dict[str, Any]]:
    return {
        p: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(POLICY_DIR.glob("*.yaml"))
    }


def _resource_types(definition: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(definition, dict):
        found.update(definition.get("resource_types", []))
        for value in definition.values():
            found |= _resource_types(value)
    elif isinstance(definition, list):
        for item in definition:
            found |= _resource_types(item)
    return found


def test_policy_ids_are_unique_and_named_after_their_file() -> None:
    policies = _policies()
    assert len(policies) >= 10
    ids = [policy["metadata"]["id"] for policy in policies.values()]
    assert len(ids) == len(set(ids))
    for path, policy in policies.items():
        policy_id = policy["metadata"]["id"]
        assert re.fullmatch(r"CKV_LOOM_\d+", policy_id)
        assert path.name.startswith(f"{policy_id}_"), path
        assert policy["metadata"]["name"] and policy["definition"]


def test_script_selects_exactly_the_custom_policies() -> None:
    # The script derives --check from the YAML files with sed; run those same lines.
    lines = [
        line
        for line in SCRIPT.read_text(encoding="utf-8").splitlines()
        if line.startswith(("policies_dir=", "ids="))
    ]
    assert len(lines) == 2
    result = subprocess.run(
        ["bash", "-c", "; ".join([*lines, 'echo "$ids"'])],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    selected = set(result.stdout.strip().split(","))
    assert selected == {p["metadata"]["id"] for p in _policies().values()}


@pytest.mark.parametrize("path", sorted(POLICY_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_fixture_has_a_target_for_every_policy(path: Path) -> None:
    policy = yaml.safe_load(path.read_text(encoding="utf-8"))
    fixture = tm.load_dir(BAD_FIXTURE)
    assert _resource_types(policy["definition"]) & set(fixture.resources), path.name


def test_loom_resources_are_covered_by_a_policy() -> None:
    covered = set().union(*(_resource_types(p["definition"]) for p in _policies().values()))
    module = tm.load_dir(tm.MODULE_DIR)
    for rtype in (
        "google_cloud_run_v2_service",
        "google_cloud_tasks_queue",
        "google_firestore_field",
        "google_pubsub_subscription",
        "google_cloud_scheduler_job",
        "google_storage_bucket",
    ):
        assert rtype in module.resources and rtype in covered, rtype
    iam_types = {t for t in module.resources if t.endswith("_iam_member")}
    assert iam_types <= covered, sorted(iam_types - covered)
