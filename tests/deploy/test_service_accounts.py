"""One service account per Cloud Run service, each holding only the roles its code uses.

The roles are read from the Terraform (offline, see ``terraform_model``) and compared with an
allowlist per account: any role outside it fails, whatever resource it is granted on.
"""

from __future__ import annotations

import copy

import pytest

from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import TerraformDir

RUNTIME = {
    "roles/datastore.user",  # the event store (conditioned on the one database)
    "roles/cloudtasks.enqueuer",  # dispatching executions
    "roles/iam.serviceAccountUser",  # the tasks' OIDC token is the invoker's (actAs)
    "roles/storage.objectCreator",  # payloads over the blob threshold
    "roles/storage.objectViewer",
}

ALLOWED_ROLES: dict[str, set[str]] = {
    "worker": RUNTIME | {"roles/secretmanager.secretAccessor"},  # checks resumes, verdicts
    "tasks": RUNTIME,  # no secret: it never checks a caller's secret
    "events": RUNTIME | {"roles/secretmanager.secretAccessor"},  # checks signed messages
    "invoker": {"roles/run.invoker"},
}

FORBIDDEN_ANYWHERE = {
    "roles/owner",
    "roles/editor",
    "roles/storage.objectUser",  # includes delete
    "roles/storage.objectAdmin",
    "roles/storage.admin",
    "roles/iam.serviceAccountTokenCreator",
}


def roles_by_account(model: TerraformDir) -> dict[str, set[str]]:
    """Account -> every role the module grants it."""
    return {
        account: {role for role, _ in grants} for account, grants in tm.granted_roles(model).items()
    }


def role_problems(model: TerraformDir) -> list[str]:
    """Every role an account holds outside its allowlist, and every forbidden role."""
    problems: list[str] = []
    roles = roles_by_account(model)
    for account, allowed in ALLOWED_ROLES.items():
        extra = sorted(roles.get(account, set()) - allowed)
        if extra:
            problems.append(f"{account} holds roles outside its allowlist: {extra}")
    for account, held in roles.items():
        for role in sorted(held & FORBIDDEN_ANYWHERE):
            problems.append(f"{account} holds {role}")
    return problems


def identity_problems(model: TerraformDir) -> list[str]:
    """Each service runs as its own account, and no two services share one."""
    service = model.resource("google_cloud_run_v2_service", "loom")
    template = tm.block(service, "template") or {}
    if template.get("service_account") != "${local.service_accounts[each.key]}":
        return ["the services must run as local.service_accounts[each.key]"]
    accounts = model.locals.get("service_accounts")
    if not isinstance(accounts, dict):
        return ["local.service_accounts must map each service to its account"]
    problems: list[str] = []
    if set(accounts) != tm.SERVICE_TARGETS:  # type: ignore[arg-type]
        problems.append(f"local.service_accounts covers {sorted(accounts)}")  # type: ignore[arg-type]
    if len(set(accounts.values())) != len(accounts):  # type: ignore[arg-type]
        problems.append("two services share a service account")
    return problems


def test_the_module_lists_each_accounts_roles() -> None:
    roles = roles_by_account(tm.load_dir(tm.MODULE_DIR))
    assert roles["worker"] == RUNTIME | {"roles/secretmanager.secretAccessor"}
    assert roles["tasks"] == RUNTIME
    assert roles["invoker"] == {"roles/run.invoker"}


def test_every_account_holds_only_allowed_roles_and_each_service_its_own() -> None:
    model = tm.load_dir(tm.MODULE_DIR)
    assert role_problems(model) == []
    assert identity_problems(model) == []


def _secret_for_tasks(m: TerraformDir) -> None:
    m.resources["google_secret_manager_secret_iam_member"]["tasks_secret"] = {
        "secret_id": "${google_secret_manager_secret.resume.secret_id}",
        "role": "roles/secretmanager.secretAccessor",
        "member": "serviceAccount:${google_service_account.tasks.email}",
    }


def _worker_may_delete_payloads(m: TerraformDir) -> None:
    m.resource("google_storage_bucket_iam_member", "runtime_payload_writer")["role"] = (
        "roles/storage.objectUser"
    )


def _invoker_enqueues(m: TerraformDir) -> None:
    m.resources["google_cloud_tasks_queue_iam_member"]["invoker_enqueuer"] = {
        "name": "${google_cloud_tasks_queue.loom.name}",
        "role": "roles/cloudtasks.enqueuer",
        "member": "serviceAccount:${google_service_account.invoker.email}",
    }


def _shared_identity(m: TerraformDir) -> None:
    template = tm.block(m.resource("google_cloud_run_v2_service", "loom"), "template")
    assert template is not None
    template["service_account"] = "${google_service_account.worker.email}"


@pytest.mark.parametrize(
    "mutate",
    [_secret_for_tasks, _worker_may_delete_payloads, _invoker_enqueues, _shared_identity],
    ids=["secret-for-tasks", "payload-delete", "invoker-enqueues", "shared-identity"],
)
def test_the_check_fails_on_a_role_outside_the_allowlist(mutate: object) -> None:
    model = copy.deepcopy(tm.load_dir(tm.MODULE_DIR))
    mutate(model)  # type: ignore[operator]
    assert role_problems(model) + identity_problems(model) != []
