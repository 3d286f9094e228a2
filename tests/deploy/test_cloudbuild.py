"""cloudbuild.yaml: valid against Cloud Build's schema, steps in the pipeline's order."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import REPO_ROOT

CLOUDBUILD = REPO_ROOT / "cloudbuild.yaml"
PIPELINE = ["lint", "type-check", "ci-image", "tests", "build", "push", "replay-check", "deploy"]


def _load() -> dict[str, Any]:
    return yaml.safe_load(CLOUDBUILD.read_text(encoding="utf-8"))


def _check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("check-jsonschema")
    command = [exe] if exe else [sys.executable, "-m", "check_jsonschema"]
    return subprocess.run(
        [*command, "--builtin-schema", "vendor.cloudbuild", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _text(step: dict[str, Any]) -> str:
    return " ".join(str(a) for a in step.get("args", []))


def pipeline_problems(config: dict[str, Any]) -> list[str]:
    """Order and content of the steps; empty when the pipeline is right."""
    problems: list[str] = []
    steps: list[dict[str, Any]] = config.get("steps", [])
    ids = [step.get("id") for step in steps]
    if ids != PIPELINE:
        problems.append(f"step ids {ids} must be {PIPELINE}")
    for index, step in enumerate(steps):
        wait_for = step.get("waitFor")
        # waitFor can start a step early (["-"] = at once); only "after the previous" is allowed.
        if wait_for is not None and (index == 0 or wait_for != [steps[index - 1].get("id")]):
            problems.append(f"step {step.get('id')} must not change the order with waitFor")
    by_id = {step.get("id"): step for step in steps}
    expectations = {
        "lint": ("ruff check", "ruff format --check"),
        "type-check": ("pyright",),
        "ci-image": ("build", "infra/ci.Dockerfile"),
        "tests": ("bash .ci/run",),
        "build": ("build", "infra/Dockerfile"),
        "push": ("push",),
        "replay-check": ("replay-check",),
        "deploy": ("gcloud run deploy", "worker tasks events", "--image="),
    }
    for step_id, needles in expectations.items():
        text = _text(by_id.get(step_id, {}))
        for needle in needles:
            if needle not in text:
                problems.append(f"step {step_id} lacks {needle!r}")
    image = "${_REGION}-docker.pkg.dev/${PROJECT_ID}/${_REPO}/${_IMAGE}:${BUILD_ID}"
    for step_id in ("build", "push", "deploy"):
        if image not in _text(by_id.get(step_id, {})):
            problems.append(f"step {step_id} must use the one image {image}")
    return problems + replay_check_problems(by_id, image)


def replay_check_problems(by_id: dict[str, dict[str, Any]], image: str) -> list[str]:
    """The replay check runs the new image against the production store, and can fail."""
    step = by_id.get("replay-check", {})
    problems: list[str] = []
    if step.get("name") != image:
        problems.append(f"step replay-check must run the new image {image}")
    if not str(step.get("entrypoint", "")).endswith("loom") or step.get("args", [None])[0] != (
        "replay-check"
    ):
        problems.append("step replay-check must run `loom replay-check`")
    env = dict(e.split("=", 1) for e in step.get("env", []))
    if not env.get("LOOM_STORE", "").startswith("firestore://${PROJECT_ID}/"):
        problems.append("step replay-check must read the production Firestore store")
    if step.get("allowFailure") or step.get("allowExitCodes"):
        problems.append("step replay-check must stop the build when it fails")
    return problems


def test_cloudbuild_matches_the_builtin_schema() -> None:
    result = _check_jsonschema(CLOUDBUILD)
    assert result.returncode == 0, result.stdout + result.stderr


def _args_not_a_list(config: dict[str, Any]) -> None:
    config["steps"][0]["args"] = "not-a-list"


def _numeric_timeout(config: dict[str, Any]) -> None:
    config["timeout"] = 3600


def _misspelt_key(config: dict[str, Any]) -> None:
    config["steps"][0]["nmae"] = config["steps"][0].pop("name")


@pytest.mark.parametrize(
    "mutate",
    [_args_not_a_list, _numeric_timeout, _misspelt_key],
    ids=["args-not-a-list", "numeric-timeout", "misspelt-key"],
)
def test_schema_check_rejects_a_broken_config(mutate: Any, tmp_path: Path) -> None:
    config = _load()
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert _check_jsonschema(good).returncode == 0
    mutate(config)
    bad = tmp_path / "cloudbuild.yaml"
    bad.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = _check_jsonschema(bad)
    assert result.returncode != 0
    assert "Schema validation errors" in result.stdout + result.stderr


def test_pipeline_runs_lint_typecheck_tests_build_push_deploy() -> None:
    assert pipeline_problems(_load()) == []


def test_the_replay_check_precedes_the_deploy() -> None:
    ids = [step["id"] for step in _load()["steps"]]
    assert ids.index("push") < ids.index("replay-check") < ids.index("deploy")


def _by_id(config: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(step for step in config["steps"] if step["id"] == step_id)


def _swap(config: dict[str, Any]) -> None:
    steps = config["steps"]
    tests, build = steps.index(_by_id(config, "tests")), steps.index(_by_id(config, "build"))
    steps[tests], steps[build] = steps[build], steps[tests]


def _step(config: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in config["steps"] if s.get("id") == step_id)


def _parallel(config: dict[str, Any]) -> None:
    _step(config, "deploy")["waitFor"] = ["-"]


def _skip_tests(config: dict[str, Any]) -> None:
    config["steps"].remove(_by_id(config, "tests"))


def _other_image(config: dict[str, Any]) -> None:
    step = _step(config, "deploy")
    step["args"] = [a.replace("${BUILD_ID}", "latest") for a in step["args"]]


def _check_after_deploy(config: dict[str, Any]) -> None:
    steps = config["steps"]
    steps.append(steps.pop(steps.index(_step(config, "replay-check"))))


def _check_may_fail(config: dict[str, Any]) -> None:
    _step(config, "replay-check")["allowFailure"] = True


def _check_old_image(config: dict[str, Any]) -> None:
    step = _step(config, "replay-check")
    step["name"] = step["name"].replace("${BUILD_ID}", "latest")


def _check_local_store(config: dict[str, Any]) -> None:
    _step(config, "replay-check")["env"] = ["LOOM_STORE=sqlite:///x.db"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_swap, "step ids"),
        (_parallel, "waitFor"),
        (_skip_tests, "step ids"),
        (_other_image, "one image"),
        (_check_after_deploy, "step ids"),
        (_check_may_fail, "stop the build"),
        (_check_old_image, "new image"),
        (_check_local_store, "production Firestore"),
    ],
    ids=[
        "build-before-tests",
        "deploy-in-parallel",
        "no-tests",
        "deploys-another-image",
        "replay-check-after-deploy",
        "replay-check-may-fail",
        "replay-check-on-an-old-image",
        "replay-check-on-another-store",
    ],
)
def test_pipeline_checker_catches(mutate: Any, expected: str) -> None:
    config = copy.deepcopy(_load())
    mutate(config)
    problems = pipeline_problems(config)
    assert any(expected in p for p in problems), problems


def test_substitutions_match_the_terraform_defaults() -> None:
    subs = _load()["substitutions"]
    module = tm.load_dir(tm.MODULE_DIR)
    example = tm.load_dir(tm.EXAMPLE_DIR)
    prefix = example.var_default("name_prefix")
    assert prefix == module.var_default("name_prefix")
    # The repository id and the service names are the module's name_prefix.
    assert subs["_REPO"] == prefix
    assert subs["_SERVICE_PREFIX"] == prefix
    assert subs["_REGION"] == example.var_default("region")
    # The replay check reads the database and payload bucket the services use.
    assert subs["_FIRESTORE_DATABASE"] == module.var_default("firestore_database")
    assert subs["_PAYLOADS"] == (
        f"${{PROJECT_ID}}-{prefix}-payloads/{module.var_default('payload_prefix')}"
    )
    assert module.resource("google_artifact_registry_repository", "images")["repository_id"] == (
        "${var.name_prefix}"
    )
    assert module.resource("google_cloud_run_v2_service", "loom")["name"] == (
        "${var.name_prefix}-${each.key}"
    )
