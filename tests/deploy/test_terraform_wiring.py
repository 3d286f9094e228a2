"""Offline: what Terraform puts in the services' environment reaches the code that reads it.

The service env is read from the parsed module, ``${var.x}`` resolved from the variable's
default (or a value given here, as a ``terraform.tfvars`` would), and handed to the real
consumers: the Cloud Tasks dispatcher and the log formatter's trace fields.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from loom.wire import ExecutionPackage
from loom.workers.logs import TRACE_KEY, trace_fields
from loom_gcp.cloud_tasks import CloudTasksDispatcher
from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import TerraformDir

QUEUE_URL = "cloudtasks://projects/p/locations/l/queues/q"


@pytest.fixture
def mod() -> TerraformDir:
    return copy.deepcopy(tm.load_dir(tm.MODULE_DIR))


def resolved_env(model: TerraformDir, tfvars: dict[str, Any]) -> dict[str, str]:
    """The plain env values of the services, with ``${var.x}`` substituted."""

    def value_of(name: str) -> str:
        return str(tfvars[name] if name in tfvars else model.var_default(name))

    env: dict[str, str] = {}
    for name, item in tm.service_env(model).items():
        raw = item.get("value")
        if isinstance(raw, str):
            env[name] = re.sub(r"\$\{var\.(\w+)\}", lambda m: value_of(m.group(1)), raw)
    return env


def dispatcher_for(env: dict[str, str]) -> CloudTasksDispatcher:
    return CloudTasksDispatcher.from_url(
        QUEUE_URL, {**env, "LOOM_TASKS_TARGET_URL": "https://loom-tasks.example"}
    )


@pytest.mark.parametrize("deadline", [None, 120, 1800])
def test_dispatch_deadline_reaches_every_task(mod: TerraformDir, deadline: int | None) -> None:
    tfvars = {"project_id": "p"} | (
        {} if deadline is None else {"dispatch_deadline_seconds": deadline}
    )
    env = resolved_env(mod, tfvars)
    task = dispatcher_for(env).build_task(ExecutionPackage(execution_id="e", flow="f"), "e:1")
    expected = deadline or mod.var_default("dispatch_deadline_seconds")
    assert task.dispatch_deadline.total_seconds() == expected


def test_without_the_env_var_the_dispatcher_would_ignore_the_variable(mod: TerraformDir) -> None:
    """The wiring is what carries the variable: drop it and the 600 s default comes back."""
    container = tm.blocks(
        tm.block(mod.resource("google_cloud_run_v2_service", "loom"), "template") or {},
        "containers",
    )[0]
    container["env"] = [
        e for e in container["env"] if e.get("name") != "LOOM_TASKS_DISPATCH_DEADLINE"
    ]
    env = resolved_env(mod, {"project_id": "p", "dispatch_deadline_seconds": 120})
    assert dispatcher_for(env).dispatch_deadline == 600
    assert any("LOOM_TASKS_DISPATCH_DEADLINE" in p for p in tm.check_env(mod))


def test_logs_name_the_trace_with_the_project_terraform_sets(
    mod: TerraformDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = resolved_env(mod, {"project_id": "loom-prod"})
    monkeypatch.delenv("GCP_PROJECT", raising=False)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", env["GOOGLE_CLOUD_PROJECT"])
    fields = trace_fields({"X-Cloud-Trace-Context": "0af7651916cd43dd8448eb211c80319c/1;o=1"})
    assert fields[TRACE_KEY] == "projects/loom-prod/traces/0af7651916cd43dd8448eb211c80319c"


def test_checker_catches_a_project_env_that_is_not_the_project(mod: TerraformDir) -> None:
    assert tm.check_env(mod) == []
    tm.service_env(mod)["GOOGLE_CLOUD_PROJECT"]["value"] = "some-other-project"
    assert any("GOOGLE_CLOUD_PROJECT" in p for p in tm.check_env(mod))


def _drop_purge_job(m: TerraformDir) -> None:
    del m.resources["google_cloud_scheduler_job"]["purge"]


def _ttl_before_purge(m: TerraformDir) -> None:
    tm.service_env(m)["LOOM_TTL_DAYS"]["value"] = "${var.retention_days}"


def _drop_oldest_first_index(m: TerraformDir) -> None:
    del m.resources["google_firestore_index"]["executions_by_shard_status_created_asc"]


def _purge_elsewhere(m: TerraformDir) -> None:
    target = tm.block(m.resource("google_cloud_scheduler_job", "purge"), "http_target")
    assert target is not None
    target["uri"] = '${google_cloud_run_v2_service.loom["tasks"].uri}/tasks/wipe'


@pytest.mark.parametrize(
    ("checker", "mutate", "expected"),
    [
        (tm.check_retention, _drop_purge_job, "/tasks/purge"),
        (tm.check_retention, _ttl_before_purge, "LOOM_TTL_DAYS"),
        (tm.check_firestore, _drop_oldest_first_index, "composite indexes missing"),
        (tm.check_oidc, _purge_elsewhere, "must POST one of"),
    ],
)
def test_retention_and_paging_checkers_catch(
    mod: TerraformDir, checker: Any, mutate: Any, expected: str
) -> None:
    assert checker(mod) == []
    mutate(mod)
    assert any(expected in p for p in checker(mod)), checker(mod)


def test_the_purge_job_calls_the_tasks_service_as_the_invoker(mod: TerraformDir) -> None:
    job = mod.resource("google_cloud_scheduler_job", "purge")
    target = tm.block(job, "http_target") or {}
    token = tm.block(target, "oidc_token") or {}
    assert target["http_method"] == "POST"
    assert str(target["uri"]).endswith("/tasks/purge")
    assert "google_service_account.invoker.email" in str(token["service_account_email"])


def test_retention_reaches_the_purge_and_the_ttl_comes_later(mod: TerraformDir) -> None:
    from loom.ops.retention import parse_age
    from loom_gcp.firestore import ttl_from_env

    env = resolved_env(mod, {"project_id": "p", "retention_days": 45})
    assert env["LOOM_RETENTION"] == "45d" and parse_age(env["LOOM_RETENTION"]) == 45 * 86400
    ttl = re.sub(
        r"\$\{var\.retention_days \+ (\d+)\}", lambda m: str(45 + int(m[1])), env["LOOM_TTL_DAYS"]
    )
    assert ttl_from_env({"LOOM_TTL_DAYS": ttl}).days > 45
