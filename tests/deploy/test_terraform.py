"""Offline checks of terraform/: the deployment invariants, each shown able to fail."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import TerraformDir, block, blocks

Checker = Callable[[TerraformDir], list[str]]

MODULE_CHECKERS: list[Checker] = [
    tm.check_cloud_run,
    tm.check_ingress,
    tm.check_iam,
    tm.check_tasks_queue,
    tm.check_firestore,
    tm.check_oidc,
    tm.check_timeouts,
    tm.check_probes,
    tm.check_env,
    tm.check_retention,
    tm.check_storage,
    tm.check_secret,
    tm.check_declared_variables,
]


@pytest.fixture(scope="module")
def module_dir() -> TerraformDir:
    return tm.load_dir(tm.MODULE_DIR)


@pytest.fixture(scope="module")
def example_dir() -> TerraformDir:
    return tm.load_dir(tm.EXAMPLE_DIR)


@pytest.fixture(scope="module")
def tfvars() -> dict[str, Any]:
    return tm.parse_hcl_file(tm.EXAMPLE_DIR / "terraform.tfvars.example")


@pytest.fixture
def mod(module_dir: TerraformDir) -> TerraformDir:
    """A private copy of the module that a test may break."""
    return copy.deepcopy(module_dir)


def _service(model: TerraformDir) -> dict[str, Any]:
    return model.resource("google_cloud_run_v2_service", "loom")


def _template(model: TerraformDir) -> dict[str, Any]:
    template = block(_service(model), "template")
    assert template is not None
    return template


def _container(model: TerraformDir) -> dict[str, Any]:
    return blocks(_template(model), "containers")[0]


def _env(model: TerraformDir, name: str) -> dict[str, Any]:
    return tm.service_env(model)[name]


# --------------------------------------------------------------------------- the real files


def test_every_tf_file_parses() -> None:
    files = sorted(p for p in tm.TERRAFORM_ROOT.rglob("*.tf") if ".terraform" not in p.parts)
    assert len(files) >= 15
    for path in files:
        assert isinstance(tm.parse_hcl_file(path), dict), path


def test_module_declares_the_whole_stack(module_dir: TerraformDir) -> None:
    for rtype in (
        "google_cloud_run_v2_service",
        "google_firestore_database",
        "google_firestore_field",
        "google_cloud_tasks_queue",
        "google_pubsub_topic",
        "google_pubsub_subscription",
        "google_storage_bucket",
        "google_artifact_registry_repository",
        "google_cloud_scheduler_job",
        "google_secret_manager_secret",
        "google_service_account",
    ):
        assert module_dir.of_type(rtype), f"{rtype} missing"
    assert set(module_dir.of_type("google_service_account")) == {
        "worker",
        "tasks",
        "events",
        "invoker",
        "deployer",
    }


@pytest.mark.parametrize("checker", MODULE_CHECKERS, ids=lambda c: c.__name__)
def test_module_satisfies(checker: Checker, module_dir: TerraformDir) -> None:
    assert checker(module_dir) == []


def test_no_public_member_anywhere(
    module_dir: TerraformDir, example_dir: TerraformDir, tfvars: dict[str, Any]
) -> None:
    assert tm.check_no_public_members(module_dir, example_dir, tfvars=tfvars) == []


def test_example_uses_only_declared_variables(
    module_dir: TerraformDir, example_dir: TerraformDir, tfvars: dict[str, Any]
) -> None:
    assert tm.check_declared_variables(example_dir) == []
    assert tm.check_module_call(example_dir, module_dir, tfvars) == []


def test_grants_are_exactly_the_intended_ones(module_dir: TerraformDir) -> None:
    grants = tm.granted_roles(module_dir)
    assert {k: frozenset(v) for k, v in grants.items()} == tm.EXPECTED_GRANTS


# --------------------------------------------------------------------------- each check can fail


def _set_min_instances(m: TerraformDir) -> None:
    scaling = block(_template(m), "scaling")
    assert scaling is not None
    scaling["min_instance_count"] = 1


def _drop_max_instances(m: TerraformDir) -> None:
    scaling = block(_template(m), "scaling")
    assert scaling is not None
    del scaling["max_instance_count"]


def _cpu_always_allocated(m: TerraformDir) -> None:
    resources = block(_container(m), "resources")
    assert resources is not None
    resources["cpu_idle"] = False


def _disable_invoker_iam(m: TerraformDir) -> None:
    _service(m)["invoker_iam_disabled"] = True


def _tasks_ingress_all(m: TerraformDir) -> None:
    m.locals["services"]["tasks"]["ingress"] = "INGRESS_TRAFFIC_ALL"


def _drop_events_service(m: TerraformDir) -> None:
    del m.locals["services"]["events"]


def _grant_owner_to_worker(m: TerraformDir) -> None:
    m.resources["google_project_iam_member"]["worker_owner"] = {
        "project": "${var.project_id}",
        "role": "roles/owner",
        "member": "serviceAccount:${google_service_account.worker.email}",
    }


def _drop_acts_as_invoker(m: TerraformDir) -> None:
    del m.resources["google_service_account_iam_member"]["runtime_acts_as_invoker"]


def _invoker_on_worker(m: TerraformDir) -> None:
    grant = m.resource("google_cloud_run_v2_service_iam_member", "invoker_tasks")
    grant["name"] = '${google_cloud_run_v2_service.loom["worker"].name}'


def _bucket_role_project_wide(m: TerraformDir) -> None:
    del m.resources["google_storage_bucket_iam_member"]["runtime_payload_writer"]
    m.resources["google_project_iam_member"]["worker_storage"] = {
        "role": "roles/storage.objectCreator",
        "member": "serviceAccount:${google_service_account.worker.email}",
    }


def _unconditional_datastore(m: TerraformDir) -> None:
    del m.resource("google_project_iam_member", "runtime_datastore_user")["condition"]


def _iam_binding(m: TerraformDir) -> None:
    m.resources["google_storage_bucket_iam_binding"] = {
        "readers": {"role": "roles/storage.objectViewer", "members": ["user:a@example.com"]}
    }


def _drop_startup_probe(m: TerraformDir) -> None:
    container = _container(m)
    container["dynamic"] = [d for d in blocks(container, "dynamic") if "startup_probe" not in d]


def _liveness_on_health(m: TerraformDir) -> None:
    for dyn in blocks(_container(m), "dynamic"):
        for probe in blocks(dyn, "liveness_probe"):
            probe["for_each"] = str(probe["for_each"]).replace('"/live"', '"/health"')


def _drop_retry(m: TerraformDir) -> None:
    del m.resource("google_cloud_tasks_queue", "loom")["retry_config"]


def _drop_rate_limits(m: TerraformDir) -> None:
    del m.resource("google_cloud_tasks_queue", "loom")["rate_limits"]


def _drop_ttl(m: TerraformDir) -> None:
    del m.resource("google_firestore_field", "executions_expire_at")["ttl_config"]


def _index_event_at(m: TerraformDir) -> None:
    default = m.variables["firestore_unindexed_fields"]["default"]
    default["events"] = [f for f in default["events"] if f != "at"]


def _exempt_seq(m: TerraformDir) -> None:
    m.variables["firestore_unindexed_fields"]["default"]["events"].append("seq")


def _exempt_status(m: TerraformDir) -> None:
    m.resources["google_firestore_field"]["status"] = {
        "collection": "executions",
        "field": "status",
        "index_config": [{}],
    }


def _index_created_at(m: TerraformDir) -> None:
    """``executions.created_at`` indexed alone again: every start at the tail of one range."""
    del m.locals["sharded_unindexed"]["executions.created_at"]


def _allow_exempting_status(m: TerraformDir) -> None:
    variable = m.variables["firestore_unindexed_fields"]
    for validation in blocks(variable, "validation"):
        validation["condition"] = str(validation["condition"]).replace('"executions.status"', "")


def _drop_status_index(m: TerraformDir) -> None:
    del m.resources["google_firestore_index"]["executions_by_shard_status_created"]


def _reindex_exempted_fields(m: TerraformDir) -> None:
    field = m.resource("google_firestore_field", "unindexed")
    field["index_config"] = [{"indexes": [{"order": "ASCENDING"}]}]


def _push_without_oidc(m: TerraformDir) -> None:
    push = block(m.resource("google_pubsub_subscription", "events_push"), "push_config")
    assert push is not None
    del push["oidc_token"]


def _push_audience_worker(m: TerraformDir) -> None:
    push = block(m.resource("google_pubsub_subscription", "events_push"), "push_config")
    assert push is not None
    token = block(push, "oidc_token")
    assert token is not None
    token["audience"] = '${google_cloud_run_v2_service.loom["worker"].uri}'


def _scheduler_without_oidc(m: TerraformDir) -> None:
    target = block(m.resource("google_cloud_scheduler_job", "sweep"), "http_target")
    assert target is not None
    del target["oidc_token"]


def _scheduler_as_worker(m: TerraformDir) -> None:
    target = block(m.resource("google_cloud_scheduler_job", "sweep"), "http_target")
    assert target is not None
    token = block(target, "oidc_token")
    assert token is not None
    token["service_account_email"] = "${google_service_account.worker.email}"


def _short_timeout(m: TerraformDir) -> None:
    m.variables["request_timeout_seconds"]["default"] = 300


def _literal_short_timeout(m: TerraformDir) -> None:
    _template(m)["timeout"] = "60s"


def _drop_precondition(m: TerraformDir) -> None:
    lifecycle = block(_service(m), "lifecycle")
    assert lifecycle is not None
    del lifecycle["precondition"]


def _drop_blobs_env(m: TerraformDir) -> None:
    container = _container(m)
    container["env"] = [e for e in container["env"] if e.get("name") != "LOOM_BLOBS"]


def _plain_secret(m: TerraformDir) -> None:
    env = _env(m, "LOOM_RESUME_SECRET")
    del env["value_source"]
    env["value"] = "hunter2"


def _sqlite_store(m: TerraformDir) -> None:
    _env(m, "LOOM_STORE")["value"] = "sqlite:///loom.db"


def _text_logs(m: TerraformDir) -> None:
    _env(m, "LOOM_LOG_FORMAT")["value"] = "text"


def _tasks_url_from_worker(m: TerraformDir) -> None:
    m.locals["tasks_url"] = '${google_cloud_run_v2_service.loom["worker"].uri}'


def _bucket_inherited(m: TerraformDir) -> None:
    m.resource("google_storage_bucket", "payloads")["public_access_prevention"] = "inherited"


def _bucket_acls(m: TerraformDir) -> None:
    m.resource("google_storage_bucket", "payloads")["uniform_bucket_level_access"] = False


def _bucket_forever(m: TerraformDir) -> None:
    del m.resource("google_storage_bucket", "payloads")["lifecycle_rule"]


def _secret_in_state(m: TerraformDir) -> None:
    version = m.resource("google_secret_manager_secret_version", "resume")
    del version["secret_data_wo"]
    version["secret_data"] = "hunter2"


def _undeclared_variable(m: TerraformDir) -> None:
    m.raw.append({"locals": [{"x": "${var.not_declared}"}]})


MUTATIONS: list[tuple[str, Checker, Callable[[TerraformDir], None], str]] = [
    ("min-instances", tm.check_cloud_run, _set_min_instances, "min_instance_count must be 0"),
    ("no-max", tm.check_cloud_run, _drop_max_instances, "max_instance_count is missing"),
    ("cpu-always", tm.check_cloud_run, _cpu_always_allocated, "cpu_idle must be true"),
    ("invoker-iam-off", tm.check_cloud_run, _disable_invoker_iam, "invoker_iam_disabled"),
    ("target-missing", tm.check_cloud_run, _drop_events_service, "local.services must be"),
    ("tasks-public-ingress", tm.check_ingress, _tasks_ingress_all, "tasks service ingress"),
    ("owner", tm.check_iam, _grant_owner_to_worker, "roles/owner"),
    ("missing-act-as", tm.check_iam, _drop_acts_as_invoker, "missing grants"),
    ("invoker-on-worker", tm.check_iam, _invoker_on_worker, "unexpected grants"),
    ("storage-project-wide", tm.check_iam, _bucket_role_project_wide, "unexpected grants"),
    ("datastore-any-db", tm.check_iam, _unconditional_datastore, "conditioned"),
    ("iam-binding", tm.check_iam, _iam_binding, "not checked"),
    ("no-retry", tm.check_tasks_queue, _drop_retry, "retry_config missing"),
    ("no-rate-limits", tm.check_tasks_queue, _drop_rate_limits, "rate_limits missing"),
    ("no-ttl", tm.check_firestore, _drop_ttl, "TTL"),
    ("at-indexed", tm.check_firestore, _index_event_at, "('events', 'at')"),
    ("seq-exempted", tm.check_firestore, _exempt_seq, "store queries"),
    ("status-exempted", tm.check_firestore, _exempt_status, "store queries"),
    ("created-at-indexed", tm.check_firestore, _index_created_at, "('executions', 'created_at')"),
    ("validation-weakened", tm.check_firestore, _allow_exempting_status, "status"),
    ("no-composite-index", tm.check_firestore, _drop_status_index, "composite indexes missing"),
    ("exemptions-reindexed", tm.check_firestore, _reindex_exempted_fields, "still indexed"),
    ("push-no-oidc", tm.check_oidc, _push_without_oidc, "no oidc_token"),
    ("push-wrong-audience", tm.check_oidc, _push_audience_worker, "audience"),
    ("sweep-no-oidc", tm.check_oidc, _scheduler_without_oidc, "no oidc_token"),
    ("sweep-as-worker", tm.check_oidc, _scheduler_as_worker, "invoker service account"),
    ("timeout-var", tm.check_timeouts, _short_timeout, "< dispatch deadline"),
    ("timeout-literal", tm.check_timeouts, _literal_short_timeout, "< dispatch deadline"),
    ("no-precondition", tm.check_timeouts, _drop_precondition, "no precondition"),
    ("no-startup-probe", tm.check_probes, _drop_startup_probe, "startup_probe must GET /health"),
    ("live-on-health", tm.check_probes, _liveness_on_health, "liveness_probe must GET /live"),
    ("env-missing", tm.check_env, _drop_blobs_env, "LOOM_BLOBS"),
    ("secret-plain", tm.check_env, _plain_secret, "Secret Manager"),
    ("store-sqlite", tm.check_env, _sqlite_store, "LOOM_STORE"),
    ("logs-text", tm.check_env, _text_logs, "LOOM_LOG_FORMAT"),
    ("tasks-url", tm.check_env, _tasks_url_from_worker, "deterministic"),
    ("bucket-inherited", tm.check_storage, _bucket_inherited, "public_access_prevention"),
    ("bucket-acls", tm.check_storage, _bucket_acls, "uniform_bucket_level_access"),
    ("bucket-forever", tm.check_storage, _bucket_forever, "lifecycle"),
    ("secret-in-state", tm.check_secret, _secret_in_state, "state"),
    ("undeclared-var", tm.check_declared_variables, _undeclared_variable, "var.not_declared"),
]


@pytest.mark.parametrize(
    ("checker", "mutate", "expected"),
    [pytest.param(c, m, e, id=i) for i, c, m, e in MUTATIONS],
)
def test_checker_catches(
    checker: Checker, mutate: Callable[[TerraformDir], None], expected: str, mod: TerraformDir
) -> None:
    assert checker(mod) == []
    mutate(mod)
    problems = checker(mod)
    assert any(expected in p for p in problems), problems


BAD_SNIPPETS = {
    "public-invoker": (
        'resource "google_cloud_run_v2_service_iam_member" "public" {\n'
        '  name   = "loom-worker"\n'
        '  role   = "roles/run.invoker"\n'
        '  member = "allUsers"\n'
        "}\n"
    ),
    "public-binding": (
        'resource "google_storage_bucket_iam_binding" "public" {\n'
        '  bucket  = "b"\n'
        '  role    = "roles/storage.objectViewer"\n'
        '  members = ["allAuthenticatedUsers"]\n'
        "}\n"
    ),
    "public-by-variable": (
        'variable "invokers" {\n'
        "  type    = list(string)\n"
        '  default = ["allUsers"]\n'
        "}\n"
        'resource "google_cloud_run_v2_service_iam_member" "people" {\n'
        "  for_each = toset(var.invokers)\n"
        '  name     = "loom-worker"\n'
        '  role     = "roles/run.invoker"\n'
        "  member   = each.value\n"
        "}\n"
    ),
}


@pytest.mark.parametrize("snippet", list(BAD_SNIPPETS.values()), ids=list(BAD_SNIPPETS))
def test_public_member_checker_catches_snippet(snippet: str, tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(snippet, encoding="utf-8")
    problems = tm.check_no_public_members(tm.load_dir(tmp_path))
    assert any("public" in p for p in problems), problems


def test_variable_without_public_validation_is_caught(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(
        'variable "invokers" {\n  type = list(string)\n  default = []\n}\n'
        'resource "google_cloud_run_v2_service_iam_member" "people" {\n'
        "  for_each = toset(var.invokers)\n"
        '  role     = "roles/run.invoker"\n'
        "  member   = each.value\n"
        "}\n",
        encoding="utf-8",
    )
    problems = tm.check_no_public_members(tm.load_dir(tmp_path))
    assert any("no validation refusing public members" in p for p in problems), problems


def test_public_member_in_tfvars_is_caught(tfvars: dict[str, Any]) -> None:
    bad = {**tfvars, "worker_invokers": ["allUsers"]}
    assert tm.check_no_public_members(tfvars=bad)


def test_module_call_checker_catches(
    module_dir: TerraformDir, example_dir: TerraformDir, tfvars: dict[str, Any]
) -> None:
    example = copy.deepcopy(example_dir)
    call = example.modules["loom"]
    call["no_such_input"] = 1
    del call["loom_app"]
    example.outputs["broken"] = {"value": "${module.loom.no_such_output}"}
    problems = tm.check_module_call(example, module_dir, {**tfvars, "typo_region": "x"})
    for expected in (
        "no_such_input is not a variable",
        "required variable loom_app",
        "no_such_output does not exist",
        "undeclared variable typo_region",
    ):
        assert any(expected in p for p in problems), (expected, problems)
    lacking = {k: v for k, v in tfvars.items() if k != "project_id"}
    assert any(
        "lacks required variable project_id" in p
        for p in tm.check_module_call(example_dir, module_dir, lacking)
    )


def test_normalize_strips_hcl2_quoting_and_markers() -> None:
    raw = {'"a"': [{'"b"': '"x \\"y\\""', "__is_block__": True, "__comments__": ["# c"]}]}
    assert tm.normalize(raw) == {"a": [{"b": 'x "y"'}]}
