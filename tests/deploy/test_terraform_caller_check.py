"""The deployed services check their callers and hold a grant policy, secure by default:
the Terraform module wires ``LOOM_CALLER_AUTH`` (audiences, principals, Cloud Run's IAM
trusted) and ``LOOM_GRANTS`` into the services, and the checker fails on each way of
breaking that. ``tests/security/test_deployed_caller_check.py`` runs the worker with these
settings; ``infra/checkov/CKV_LOOM_15`` checks the same in the offline checks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import TerraformDir


def test_the_module_wires_the_caller_check_and_the_grant_policy() -> None:
    assert tm.check_caller_check(tm.load_dir(tm.MODULE_DIR)) == []


def _env(m: TerraformDir, name: str) -> dict[str, object]:
    return tm.service_env(m)[name]


def _drop(name: str) -> Callable[[TerraformDir], None]:
    def mutate(m: TerraformDir) -> None:
        service = m.resource("google_cloud_run_v2_service", "loom")
        container = tm.blocks(tm.block(service, "template") or {}, "containers")[0]
        container["env"] = [e for e in container["env"] if e.get("name") != name]

    return mutate


def _off_by_default(m: TerraformDir) -> None:
    m.variables["caller_check"]["default"] = False


def _open_grants(m: TerraformDir) -> None:
    m.variables["grant_policy"]["default"] = {"grants": [{"principal": "x", "capabilities": ["p"]}]}


def _anyone_trusted(m: TerraformDir) -> None:
    _env(m, "LOOM_AUTH_TRUST_CLOUD_RUN")["value"] = "false"


def _no_tasks_check(m: TerraformDir) -> None:
    m.locals["caller_checked"] = '${toset(var.caller_check ? ["worker"] : [])}'


def _operators_left_out(m: TerraformDir) -> None:
    m.locals["caller_principals"]["worker"] = "${distinct(concat(local.invoker_emails))}"


def _legacy_audience(m: TerraformDir) -> None:
    m.locals["caller_audiences"]["worker"] = '${["https://example.a.run.app"]}'


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_drop("LOOM_CALLER_AUTH"), "LOOM_CALLER_AUTH is not set"),
        (_drop("LOOM_GRANTS"), "LOOM_GRANTS is not set"),
        (_drop("LOOM_AUTH_PRINCIPALS"), "LOOM_AUTH_PRINCIPALS is not set"),
        (_off_by_default, "default to true"),
        (_open_grants, "no grants at all"),
        (_anyone_trusted, "LOOM_AUTH_TRUST_CLOUD_RUN must be built"),
        (_no_tasks_check, "worker and tasks"),
        (_operators_left_out, "var.console_operators"),
        (_legacy_audience, "deterministic URL"),
    ],
    ids=[
        "no-caller-auth",
        "no-grants",
        "no-principals",
        "off-by-default",
        "open-grants",
        "untrusted",
        "tasks-unchecked",
        "operators-left-out",
        "wrong-audience",
    ],
)
def test_the_checker_catches(mutate: Callable[[TerraformDir], None], expected: str) -> None:
    model = tm.load_dir(tm.MODULE_DIR)
    assert tm.check_caller_check(model) == []
    mutate(model)
    problems = tm.check_caller_check(model)
    assert any(expected in p for p in problems), problems
