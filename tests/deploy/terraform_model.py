"""Parse the Terraform in ``terraform/`` offline and check Loom's deployment invariants.

The google provider cannot be downloaded on the machines that run the tests, so
``terraform validate`` is impossible. Instead python-hcl2 parses every ``.tf``
file and the checkers below assert, on the parsed model, what Loom relies on:
scale to zero, private services, least-privilege IAM, retries, TTL, OIDC,
timeouts and environment wiring. Every checker returns a list of problems (empty
when the configuration is right), so a test can show that each one fails on a
broken copy of the configuration.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2

REPO_ROOT = Path(__file__).resolve().parents[2]
TERRAFORM_ROOT = REPO_ROOT / "terraform"
MODULE_DIR = TERRAFORM_ROOT / "modules" / "loom"
EXAMPLE_DIR = TERRAFORM_ROOT / "environments" / "example"

PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
SERVICE_TARGETS = frozenset({"worker", "tasks", "events"})

# The runtime contract of the container: every service gets these variables.
REQUIRED_ENV = frozenset(
    {
        "FUNCTION_TARGET",
        "LOOM_APP",
        "LOOM_STORE",
        "LOOM_DISPATCH",
        "LOOM_TASKS_TARGET_URL",
        "LOOM_TASKS_SERVICE_ACCOUNT",
        "LOOM_BLOBS",
        "LOOM_RESUME_SECRET",
        "LOOM_LOG_FORMAT",
        "LOOM_TASKS_DISPATCH_DEADLINE",
        "GOOGLE_CLOUD_PROJECT",
        "LOOM_RETENTION",
        "LOOM_TTL_DAYS",
    }
)

# Single-field index exemptions: monotonic or large fields that the store never
# filters or orders by.
REQUIRED_UNINDEXED = frozenset(
    {
        ("events", "at"),
        ("events", "body"),
        ("events", "bodies"),
        ("events", "last"),
        ("executions", "start"),
        ("executions", "head"),
        ("executions", "end"),
        ("executions", "updated_at"),
        ("executions", "expire_at"),
        ("snapshots", "data"),
    }
)

# Fields the Firestore store (infra/loom_gcp/) filters or orders by: exempting them would break its
# queries on real Firestore (the emulator does not enforce indexes).
QUERIED_FIELDS = frozenset(
    {
        ("events", "seq"),
        ("executions", "created_at"),
        ("executions", "flow"),
        ("executions", "status"),
        ("executions", "wake_at"),
    }
)

# Composite indexes of the store's listings: status or flow equality + order by another field.
REQUIRED_COMPOSITE_INDEXES = frozenset(
    {
        ("executions", (("status", "ASCENDING"), ("created_at", "DESCENDING"))),
        ("executions", (("status", "ASCENDING"), ("created_at", "ASCENDING"))),
        ("executions", (("status", "ASCENDING"), ("wake_at", "ASCENDING"))),
        ("executions", (("flow", "ASCENDING"), ("created_at", "DESCENDING"))),
        (
            "executions",
            (("flow", "ASCENDING"), ("status", "ASCENDING"), ("created_at", "DESCENDING")),
        ),
    }
)

PUBSUB_AGENT = "pubsub-service-agent"

# What Cloud Scheduler may call on the tasks service.
SCHEDULED_ROUTES = ("/tasks/sweep", "/tasks/purge", "/tasks/schedules")

# Who may do what, on which resource. ``project`` marks a project-level grant.
_RUNTIME_BASE = frozenset(
    {
        ("roles/datastore.user", "project"),
        ("roles/cloudtasks.enqueuer", "queue:loom"),
        ("roles/storage.objectCreator", "bucket:payloads"),
        ("roles/storage.objectViewer", "bucket:payloads"),
        ("roles/iam.serviceAccountUser", "service_account:invoker"),
    }
)
_READS_SECRET = frozenset({("roles/secretmanager.secretAccessor", "secret:resume")})

EXPECTED_GRANTS: dict[str, frozenset[tuple[str, str]]] = {
    # One identity per Cloud Run service; only the API and the events target read the
    # secret (they check resumes, verdicts and signed messages); nobody deletes payloads.
    "worker": _RUNTIME_BASE | _READS_SECRET,
    "tasks": _RUNTIME_BASE,
    "events": _RUNTIME_BASE | _READS_SECRET,
    "invoker": frozenset(
        {
            ("roles/run.invoker", "run:tasks"),
            ("roles/run.invoker", "run:events"),
        }
    ),
    "deployer": frozenset(
        {
            ("roles/artifactregistry.writer", "repository:images"),
            ("roles/run.developer", "run:worker"),
            ("roles/run.developer", "run:tasks"),
            ("roles/run.developer", "run:events"),
            ("roles/iam.serviceAccountUser", "service_account:worker"),
            ("roles/iam.serviceAccountUser", "service_account:tasks"),
            ("roles/iam.serviceAccountUser", "service_account:events"),
            ("roles/storage.objectViewer", "bucket:build_sources"),
            ("roles/logging.logWriter", "project"),
            # Read-only, for the replay check before deploy.
            ("roles/datastore.viewer", "project"),
            ("roles/storage.objectViewer", "bucket:payloads"),
        }
    ),
    "var.worker_invokers": frozenset({("roles/run.invoker", "run:worker")}),
    "var.console_operators": frozenset({("roles/run.invoker", "run:worker")}),
    "var.event_publishers": frozenset({("roles/pubsub.publisher", "topic:events")}),
    PUBSUB_AGENT: frozenset(
        {
            ("roles/pubsub.publisher", "topic:events_dead_letter"),
            ("roles/pubsub.subscriber", "subscription:events_push"),
        }
    ),
}

# IAM resource types the module may use, and the argument naming their target.
IAM_MEMBER_TARGETS: dict[str, tuple[str, str]] = {
    "google_project_iam_member": ("project", "project"),
    "google_cloud_run_v2_service_iam_member": ("run", "name"),
    "google_cloud_tasks_queue_iam_member": ("queue", "name"),
    "google_storage_bucket_iam_member": ("bucket", "bucket"),
    "google_secret_manager_secret_iam_member": ("secret", "secret_id"),
    "google_service_account_iam_member": ("service_account", "service_account_id"),
    "google_artifact_registry_repository_iam_member": ("repository", "repository"),
    "google_pubsub_topic_iam_member": ("topic", "topic"),
    "google_pubsub_subscription_iam_member": ("subscription", "subscription"),
}

_VAR_REF = re.compile(r"\bvar\.([A-Za-z_][A-Za-z0-9_-]*)")
_RESOURCE_REF = re.compile(r"\b(google_[a-z0-9_]+)\.([A-Za-z0-9_-]+)(?:\[([^\]]+)\])?")


# --------------------------------------------------------------------------- parsing


def _unquote(value: str) -> str:
    """Strips the quotes python-hcl2 (>= 7) keeps around string literals."""
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        return value[1:-1].replace('\\"', '"')
    return value


def normalize(node: Any) -> Any:
    """Turns python-hcl2 output into plain values: no quotes, no comments, no markers.

    Keys such as ``__is_block__`` and ``__comments__`` (added by python-hcl2 >= 7) are dropped.
    """
    if isinstance(node, dict):
        return {
            _unquote(str(key)): normalize(value)
            for key, value in node.items()
            if not (str(key).startswith("__") and str(key).endswith("__"))
        }
    if isinstance(node, list):
        return [normalize(item) for item in node]
    if isinstance(node, str):
        return _unquote(node)
    return node


def parse_hcl_file(path: Path) -> dict[str, Any]:
    """Parses one HCL file (.tf or .tfvars) into normalized plain values."""
    with path.open(encoding="utf-8") as handle:
        return normalize(hcl2.load(handle))


@dataclass
class TerraformDir:
    """Everything declared in one Terraform directory (a module or an environment)."""

    path: Path
    resources: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    ephemeral: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw: list[dict[str, Any]] = field(default_factory=list)

    def resource(self, rtype: str, name: str) -> dict[str, Any]:
        return self.resources[rtype][name]

    def of_type(self, rtype: str) -> dict[str, dict[str, Any]]:
        return self.resources.get(rtype, {})

    def var_default(self, name: str) -> Any:
        return self.variables[name].get("default")

    def local_source(self, name: str) -> str | None:
        """The variable a local is computed from, when it is computed from exactly one."""
        found = set(_VAR_REF.findall(str(self.locals.get(name, ""))))
        return found.pop() if len(found) == 1 else None


def _labelled(blocks: list[dict[str, Any]], depth: int) -> Iterator[tuple[list[str], Any]]:
    for block in blocks:
        for label, body in block.items():
            if depth == 1:
                yield [label], body
            else:
                for labels, inner in _labelled([body], depth - 1):
                    yield [label, *labels], inner


def load_dir(path: Path) -> TerraformDir:
    """Parses every ``*.tf`` file of one directory (not recursive, like Terraform)."""
    model = TerraformDir(path=path)
    for tf_file in sorted(path.glob("*.tf")):
        parsed = parse_hcl_file(tf_file)
        model.raw.append(parsed)
        for kind, target in (
            ("resource", model.resources),
            ("data", model.data),
            ("ephemeral", model.ephemeral),
        ):
            for (rtype, name), body in _labelled(parsed.get(kind, []), 2):
                target.setdefault(rtype, {})[name] = body
        for (name,), body in _labelled(parsed.get("variable", []), 1):
            model.variables[name] = body
        for (name,), body in _labelled(parsed.get("output", []), 1):
            model.outputs[name] = body
        for (name,), body in _labelled(parsed.get("module", []), 1):
            model.modules[name] = body
        for block in parsed.get("locals", []):
            model.locals.update(block)
    return model


def block(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The single nested block ``name`` of ``body`` (python-hcl2 gives blocks as lists)."""
    value = body.get(name)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return value[0]
    if isinstance(value, dict):
        return value
    return None


def blocks(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Every nested block ``name`` of ``body``."""
    value = body.get(name)
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    if isinstance(value, dict):
        return [value]
    return []


def walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Yields every scalar of a parsed tree with the keys that lead to it."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for item in node:
            yield from walk(item, path)
    else:
        yield path, node


def resolve_number(expr: Any, model: TerraformDir) -> float | None:
    """The value of a literal or of ``${var.x}`` / ``"${var.x}s"`` from the variable's default."""
    if isinstance(expr, bool):
        return None
    if isinstance(expr, int | float):
        return float(expr)
    if not isinstance(expr, str):
        return None
    match = re.fullmatch(r"\$\{var\.(\w+)\}s?", expr.strip())
    if match and match.group(1) in model.variables:
        default = model.var_default(match.group(1))
        return float(default) if isinstance(default, int | float) else None
    literal = re.fullmatch(r"(\d+(?:\.\d+)?)s?", expr.strip())
    return float(literal.group(1)) if literal else None


def _service_keys(model: TerraformDir) -> set[str]:
    services = model.locals.get("services")
    return set(services) if isinstance(services, dict) else set()


def references(value: Any) -> list[tuple[str, str | None]]:
    """(name, index) of every ``google_*`` resource reference in ``value``."""
    found: list[tuple[str, str | None]] = []
    for _, scalar in walk(value):
        if isinstance(scalar, str):
            for match in _RESOURCE_REF.finditer(scalar):
                index = match.group(3)
                found.append((match.group(2), index.strip('"') if index else None))
    return found


# --------------------------------------------------------------------------- checkers


def check_cloud_run(model: TerraformDir) -> list[str]:
    """Scale to zero, a max, request-based CPU, private ingress for internal targets."""
    problems: list[str] = []
    services = model.of_type("google_cloud_run_v2_service")
    if not services:
        return ["no google_cloud_run_v2_service in the module"]
    if _service_keys(model) != SERVICE_TARGETS:
        problems.append(f"local.services must be exactly {sorted(SERVICE_TARGETS)}")
    for name, body in services.items():
        where = f"google_cloud_run_v2_service.{name}"
        if body.get("invoker_iam_disabled") is True:
            problems.append(f"{where}: invoker_iam_disabled makes the service public")
        template = block(body, "template") or {}
        scaling = block(template, "scaling") or {}
        if scaling.get("min_instance_count") != 0:
            problems.append(f"{where}: template.scaling.min_instance_count must be 0")
        if scaling.get("max_instance_count") in (None, ""):
            problems.append(f"{where}: template.scaling.max_instance_count is missing")
        containers = blocks(template, "containers")
        if not containers:
            problems.append(f"{where}: no container")
        for container in containers:
            resources = block(container, "resources") or {}
            if resources.get("cpu_idle") is not True:
                problems.append(f"{where}: resources.cpu_idle must be true (request-based CPU)")
    return problems


def check_ingress(model: TerraformDir) -> list[str]:
    """Only the worker may take traffic from outside Google; tasks and events are internal."""
    problems: list[str] = []
    services = model.locals.get("services")
    if not isinstance(services, dict):
        return ["local.services is missing"]
    for target in ("tasks", "events"):
        ingress = (services.get(target) or {}).get("ingress")
        if ingress != "INGRESS_TRAFFIC_INTERNAL_ONLY":
            problems.append(f"{target} service ingress must be INGRESS_TRAFFIC_INTERNAL_ONLY")
    for name, body in model.of_type("google_cloud_run_v2_service").items():
        if body.get("ingress") != "${each.value.ingress}":
            problems.append(
                f"google_cloud_run_v2_service.{name}: ingress must come from local.services"
            )
    return problems


def check_no_public_members(
    *models: TerraformDir, tfvars: dict[str, Any] | None = None
) -> list[str]:
    """allUsers / allAuthenticatedUsers may only appear in validations that refuse them."""
    problems: list[str] = []
    trees: list[tuple[str, Any]] = [(str(m.path.name), m.raw) for m in models]
    if tfvars is not None:
        trees.append(("tfvars", tfvars))
    for label, tree in trees:
        for path, scalar in walk(tree):
            if not isinstance(scalar, str):
                continue
            if any(member in scalar for member in PUBLIC_MEMBERS) and "validation" not in path:
                problems.append(f"{label}: public member at {'.'.join(path)}: {scalar}")
    for model in models:
        for rtype, resources in model.resources.items():
            if rtype.endswith(("_iam_binding", "_iam_policy")):
                problems.append(f"{rtype}: use *_iam_member grants, which cannot remove others")
            if not rtype.endswith("_iam_member"):
                continue
            for name, body in resources.items():
                if body.get("member") in PUBLIC_MEMBERS:
                    problems.append(f"{rtype}.{name}: public member")
                if body.get("member") == "${each.value}":
                    source = str(body.get("for_each", ""))
                    for var_name in _VAR_REF.findall(source):
                        variable = model.variables.get(var_name, {})
                        default = variable.get("default") or []
                        if any(member in PUBLIC_MEMBERS for member in default):
                            problems.append(f"var.{var_name}: default grants a public member")
                        if not _refuses_public(variable):
                            problems.append(
                                f"var.{var_name}: no validation refusing public members"
                            )
    return problems


def _refuses_public(variable: dict[str, Any]) -> bool:
    for validation in blocks(variable, "validation"):
        condition = str(validation.get("condition", ""))
        if all(member in condition for member in PUBLIC_MEMBERS):
            return True
    return False


def _principal(member: Any) -> str:
    member = str(member)
    if member == "${each.value}":
        return "each.value"
    match = re.search(r"google_service_account\.(\w+)\.(?:email|member)", member)
    if match:
        return match.group(1)
    if "@gcp-sa-pubsub.iam.gserviceaccount.com" in member:
        return PUBSUB_AGENT
    return member


def _iam_targets(rtype: str, body: dict[str, Any], model: TerraformDir) -> list[str]:
    kind, argument = IAM_MEMBER_TARGETS[rtype]
    if kind == "project":
        return ["project"]
    value = body.get(argument, "")
    if "local.service_account_ids[each.key]" in str(value):
        return [f"{kind}:{key}" for key in sorted(_for_each_keys(body, model))]
    refs = references(value)
    if not refs:
        return [f"{kind}:{value}"]
    targets: list[str] = []
    for name, index in refs:
        if index == "each.key":
            keys = _for_each_keys(body, model)
            targets.extend(f"{kind}:{key}" for key in sorted(keys))
        elif index is not None:
            targets.append(f"{kind}:{index}")
        else:
            targets.append(f"{kind}:{name}")
    return targets


def _for_each_keys(body: dict[str, Any], model: TerraformDir) -> set[str]:
    source = str(body.get("for_each", ""))
    if source == "${local.services}":
        return _service_keys(model)
    if source == "${local.secret_readers}":
        return set(re.findall(r'"(\w+)"', str(model.locals.get("secret_readers", ""))))
    return {source}


def granted_roles(model: TerraformDir) -> dict[str, set[tuple[str, str]]]:
    """principal -> {(role, target)} computed from every IAM resource of the module."""
    grants: dict[str, set[tuple[str, str]]] = {}
    for rtype, resources in model.resources.items():
        if "_iam_" not in rtype:
            continue
        for name, body in resources.items():
            if rtype not in IAM_MEMBER_TARGETS:
                grants.setdefault(f"unsupported:{rtype}.{name}", set())
                continue
            principal = _principal(body.get("member"))
            if "local.service_accounts[each.key]" in principal:
                # One grant per service identity: the for_each keys name the accounts.
                for key in _for_each_keys(body, model):
                    for target in _iam_targets(rtype, body, model):
                        grants.setdefault(key, set()).add((str(body.get("role")), target))
                continue
            if principal == "each.value":
                principal = "+".join(_VAR_REF.findall(str(body.get("for_each", "")))) or principal
                principal = f"var.{principal}"
            for target in _iam_targets(rtype, body, model):
                grants.setdefault(principal, set()).add((str(body.get("role")), target))
    return grants


def check_iam(model: TerraformDir) -> list[str]:
    """Each identity holds exactly its intended roles; Firestore access is per database."""
    problems: list[str] = []
    grants = granted_roles(model)
    for principal in sorted(set(grants) | set(EXPECTED_GRANTS)):
        actual = grants.get(principal, set())
        expected = set(EXPECTED_GRANTS.get(principal, frozenset()))
        if principal.startswith("unsupported:"):
            problems.append(f"{principal}: IAM resource type not checked by this test")
        elif actual != expected:
            extra = sorted(actual - expected)
            missing = sorted(expected - actual)
            problems.append(f"{principal}: unexpected grants {extra}, missing grants {missing}")
    for role, _ in (r for roles in grants.values() for r in roles):
        if role in {"roles/owner", "roles/editor", "roles/viewer"}:
            problems.append(f"basic role {role} granted")
    for name, body in model.of_type("google_project_iam_member").items():
        role = str(body.get("role"))
        if role.startswith("roles/datastore."):
            condition = block(body, "condition") or {}
            if "google_firestore_database.loom.name" not in str(condition.get("expression", "")):
                problems.append(
                    f"google_project_iam_member.{name}: {role.removeprefix('roles/')} must be conditioned on the Loom database"
                )
    return problems


def check_tasks_queue(model: TerraformDir) -> list[str]:
    problems: list[str] = []
    queues = model.of_type("google_cloud_tasks_queue")
    if not queues:
        return ["no google_cloud_tasks_queue"]
    for name, body in queues.items():
        retry = block(body, "retry_config")
        if retry is None:
            problems.append(f"google_cloud_tasks_queue.{name}: retry_config missing")
        else:
            for key in ("max_attempts", "min_backoff", "max_backoff"):
                if key not in retry:
                    problems.append(f"google_cloud_tasks_queue.{name}: retry_config.{key} missing")
        if block(body, "rate_limits") is None:
            problems.append(f"google_cloud_tasks_queue.{name}: rate_limits missing")
    return problems


def unindexed_fields(model: TerraformDir) -> set[tuple[str, str]]:
    """(collection, field) pairs whose single-field indexes are all disabled."""
    fields: set[tuple[str, str]] = set()
    for body in model.of_type("google_firestore_field").values():
        if block(body, "index_config") != {}:
            continue
        if body.get("for_each") == "${local.unindexed_fields}":
            source = model.local_source("unindexed_fields")
            default = model.var_default(source) if source else None
            for collection, names in (default or {}).items():
                fields.update((collection, name) for name in names)
        else:
            fields.add((str(body.get("collection")), str(body.get("field"))))
    return fields


def composite_indexes(model: TerraformDir) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """(collection, ((field, order), ...)) of every google_firestore_index."""
    return {
        (
            str(body.get("collection")),
            tuple((str(f.get("field_path")), str(f.get("order"))) for f in blocks(body, "fields")),
        )
        for body in model.of_type("google_firestore_index").values()
    }


def check_firestore(model: TerraformDir) -> list[str]:
    """TTL on executions.expire_at, the index exemptions, and the indexes the store needs."""
    problems: list[str] = []
    if not model.of_type("google_firestore_database"):
        problems.append("no google_firestore_database")
    ttl = [
        body
        for body in model.of_type("google_firestore_field").values()
        if body.get("collection") == "executions"
        and body.get("field") == "expire_at"
        and block(body, "ttl_config") is not None
    ]
    if not ttl:
        problems.append("no TTL policy (ttl_config) on executions.expire_at")
    unindexed = unindexed_fields(model)
    missing = REQUIRED_UNINDEXED - unindexed
    if missing:
        problems.append(f"fields still indexed: {sorted(missing)}")
    broken = QUERIED_FIELDS & unindexed
    if broken:
        problems.append(f"fields the store queries are exempted from indexing: {sorted(broken)}")
    validation = " ".join(
        str(v.get("condition", ""))
        for v in blocks(model.variables.get("firestore_unindexed_fields", {}), "validation")
    )
    for collection, name in sorted(QUERIED_FIELDS):
        if f"{collection}.{name}" not in validation:
            problems.append(f"var.firestore_unindexed_fields does not refuse {collection}.{name}")
    absent = REQUIRED_COMPOSITE_INDEXES - composite_indexes(model)
    if absent:
        problems.append(f"composite indexes missing: {sorted(absent)}")
    return problems


def _oidc_problems(where: str, token: dict[str, Any] | None, service: str) -> list[str]:
    if token is None:
        return [f"{where}: no oidc_token"]
    problems: list[str] = []
    if "google_service_account.invoker.email" not in str(token.get("service_account_email", "")):
        problems.append(f"{where}: oidc_token must use the invoker service account")
    audience = str(token.get("audience", ""))
    own = (f'google_cloud_run_v2_service.loom["{service}"].uri', f"local.{service}_url")
    if not any(url in audience for url in own):
        problems.append(f"{where}: oidc_token audience must be the {service} service URL")
    return problems


def check_oidc(model: TerraformDir) -> list[str]:
    """Pub/Sub push and Cloud Scheduler call the private services with the invoker's token."""
    problems: list[str] = []
    subscriptions = model.of_type("google_pubsub_subscription")
    pushes = [(n, b) for n, b in subscriptions.items() if block(b, "push_config") is not None]
    if not pushes:
        problems.append("no push subscription")
    for name, body in pushes:
        push = block(body, "push_config") or {}
        problems += _oidc_problems(
            f"google_pubsub_subscription.{name}", block(push, "oidc_token"), "events"
        )
    jobs = model.of_type("google_cloud_scheduler_job")
    if not jobs:
        problems.append("no Cloud Scheduler job")
    for name, body in jobs.items():
        target = block(body, "http_target")
        where = f"google_cloud_scheduler_job.{name}"
        if target is None:
            problems.append(f"{where}: no http_target")
            continue
        if target.get("http_method") != "POST" or not str(target.get("uri", "")).endswith(
            SCHEDULED_ROUTES
        ):
            problems.append(f"{where}: must POST one of {SCHEDULED_ROUTES}")
        problems += _oidc_problems(where, block(target, "oidc_token"), "tasks")
    return problems


PROBES = {"startup_probe": "/health", "liveness_probe": "/live"}


def _probe_path(container: dict[str, Any], kind: str) -> str | None:
    """The HTTP path of a probe, written as a block or as a ``dynamic`` block whose
    ``for_each`` lists the path (so the CloudEvent target can go without)."""
    for probe in blocks(container, kind):
        http = block(probe, "http_get") or {}
        return http.get("path")
    for dyn in blocks(container, "dynamic"):
        for probe in blocks(dyn, kind):
            content = block(probe, "content") or {}
            http = block(content, "http_get") or {}
            if http.get("path") == f"${{{kind}.value}}":
                paths = re.findall(r'"(/[^"]*)"', str(probe.get("for_each", "")))
                return paths[0] if len(paths) == 1 else None
    return None


def check_probes(model: TerraformDir) -> list[str]:
    """Traffic waits for readiness (``/health``: the store answers); a hung instance is
    restarted through liveness (``/live``), which never checks the store."""
    problems: list[str] = []
    for name, body in model.of_type("google_cloud_run_v2_service").items():
        template = block(body, "template") or {}
        for container in blocks(template, "containers"):
            for kind, path in PROBES.items():
                got = _probe_path(container, kind)
                if got != path:
                    problems.append(
                        f"google_cloud_run_v2_service.{name}: {kind} must GET {path}, not {got}"
                    )
    return problems


def check_timeouts(model: TerraformDir) -> list[str]:
    """Cloud Run's request timeout covers the Cloud Tasks dispatch deadline and the sweep."""
    problems: list[str] = []
    deadline = resolve_number("${var.dispatch_deadline_seconds}", model)
    sweep = resolve_number("${var.sweep_deadline_seconds}", model)
    if deadline is None:
        return ["variable dispatch_deadline_seconds has no numeric default"]
    for name, body in model.of_type("google_cloud_run_v2_service").items():
        template = block(body, "template") or {}
        timeout = resolve_number(template.get("timeout"), model)
        where = f"google_cloud_run_v2_service.{name}"
        if timeout is None:
            problems.append(f"{where}: template.timeout missing or not resolvable")
            continue
        if timeout < deadline:
            problems.append(f"{where}: timeout {timeout:g}s < dispatch deadline {deadline:g}s")
        if sweep is not None and timeout < sweep:
            problems.append(f"{where}: timeout {timeout:g}s < sweep deadline {sweep:g}s")
        conditions = [
            str(pre.get("condition", ""))
            for pre in blocks(block(body, "lifecycle") or {}, "precondition")
        ]
        if not any(
            "var.request_timeout_seconds >= var.dispatch_deadline_seconds" in c for c in conditions
        ):
            problems.append(f"{where}: no precondition timeout >= dispatch deadline")
    for name, body in model.of_type("google_cloud_scheduler_job").items():
        attempt = resolve_number(body.get("attempt_deadline"), model)
        if attempt is None:
            problems.append(f"google_cloud_scheduler_job.{name}: attempt_deadline missing")
    return problems


def service_env(model: TerraformDir) -> dict[str, dict[str, Any]]:
    """Environment variable name -> env block, of the (single) Loom Cloud Run resource."""
    env: dict[str, dict[str, Any]] = {}
    for body in model.of_type("google_cloud_run_v2_service").values():
        for container in blocks(block(body, "template") or {}, "containers"):
            for item in blocks(container, "env"):
                env[str(item.get("name"))] = item
            for dynamic in blocks(container, "dynamic"):
                # dynamic "env" { for_each = cond ? ["NAME"] : [] content { name = env.value } }
                spec = dynamic.get("env") if isinstance(dynamic, dict) else None
                if not isinstance(spec, dict):
                    continue
                for name in re.findall(r'\["(\w+)"\]', str(spec.get("for_each", ""))):
                    for content in blocks(spec, "content"):
                        env[name] = content
    return env


def check_env(model: TerraformDir) -> list[str]:
    """The runtime contract: every LOOM_* variable wired, the secret from Secret Manager."""
    problems: list[str] = []
    env = service_env(model)
    missing = REQUIRED_ENV - set(env)
    if missing:
        problems.append(f"env vars not wired: {sorted(missing)}")
    prefixes = {
        "LOOM_STORE": "firestore://",
        "LOOM_DISPATCH": "cloudtasks://projects/",
        "LOOM_BLOBS": "gs://",
        "LOOM_TASKS_TARGET_URL": "${local.tasks_url}",
        "LOOM_TASKS_SERVICE_ACCOUNT": "${google_service_account.invoker.email}",
        "LOOM_APP": "${var.loom_app}",
        "FUNCTION_TARGET": "${each.key}",
        "LOOM_LOG_FORMAT": "json",
        "LOOM_TASKS_DISPATCH_DEADLINE": "${var.dispatch_deadline_seconds}",
        "GOOGLE_CLOUD_PROJECT": "${var.project_id}",
        "LOOM_RETENTION": "${var.retention_days}d",
    }
    for name, prefix in prefixes.items():
        if name in env and not str(env[name].get("value", "")).startswith(prefix):
            problems.append(f"{name} must start with {prefix!r}")
    secret = env.get("LOOM_RESUME_SECRET")
    if secret is not None:
        ref = block(block(secret, "value_source") or {}, "secret_key_ref")
        if ref is None or "value" in secret:
            problems.append("LOOM_RESUME_SECRET must come from Secret Manager (secret_key_ref)")
        elif "google_secret_manager_secret.resume" not in str(ref.get("secret", "")):
            problems.append("LOOM_RESUME_SECRET must reference google_secret_manager_secret.resume")
    tasks_url = str(model.locals.get("tasks_url", ""))
    if not re.fullmatch(
        r"https://\$\{var\.name_prefix\}-tasks-\$\{data\.google_project\.this\.number\}\.\$\{var\.region\}\.run\.app",
        tasks_url,
    ):
        problems.append("local.tasks_url must be the tasks service's deterministic run.app URL")
    return problems


def check_storage(model: TerraformDir) -> list[str]:
    problems: list[str] = []
    buckets = model.of_type("google_storage_bucket")
    if "payloads" not in buckets:
        problems.append("no payload bucket")
    for name, body in buckets.items():
        where = f"google_storage_bucket.{name}"
        if body.get("uniform_bucket_level_access") is not True:
            problems.append(f"{where}: uniform_bucket_level_access must be true")
        if body.get("public_access_prevention") != "enforced":
            problems.append(f"{where}: public_access_prevention must be enforced")
        actions = [
            (block(rule, "action") or {}).get("type") for rule in blocks(body, "lifecycle_rule")
        ]
        if "Delete" not in actions:
            problems.append(f"{where}: no lifecycle rule deleting old objects")
    return problems


def check_declared_variables(model: TerraformDir) -> list[str]:
    """Every ``var.x`` used in a directory is declared in that directory."""
    used: set[str] = set()
    for tree in model.raw:
        for _, scalar in walk(tree):
            if isinstance(scalar, str):
                used.update(_VAR_REF.findall(scalar))
    return [
        f"{model.path.name}: var.{name} is used but not declared"
        for name in sorted(used - set(model.variables))
    ]


def check_module_call(
    env: TerraformDir, module: TerraformDir, tfvars: dict[str, Any] | None
) -> list[str]:
    """The example passes only declared module inputs, every required one, and its tfvars fit."""
    problems: list[str] = []
    meta = {"source", "version", "providers", "depends_on", "count", "for_each"}
    for name, call in env.modules.items():
        args = set(call) - meta
        for arg in sorted(args - set(module.variables)):
            problems.append(f"module.{name}: {arg} is not a variable of the module")
        required = {v for v, body in module.variables.items() if "default" not in body}
        for arg in sorted(required - args):
            problems.append(f"module.{name}: required variable {arg} is not passed")
    for name, body in env.outputs.items():
        for ref in re.findall(r"module\.\w+\.(\w+)", str(body.get("value", ""))):
            if ref not in module.outputs:
                problems.append(f"output {name}: module output {ref} does not exist")
    if tfvars is not None:
        for key in sorted(set(tfvars) - set(env.variables)):
            problems.append(f"terraform.tfvars.example sets undeclared variable {key}")
        required = {v for v, body in env.variables.items() if "default" not in body}
        for key in sorted(required - set(tfvars)):
            problems.append(f"terraform.tfvars.example lacks required variable {key}")
    return problems


def check_secret(model: TerraformDir) -> list[str]:
    """The resume secret exists and its value never reaches the state (write-only argument)."""
    problems: list[str] = []
    if "resume" not in model.of_type("google_secret_manager_secret"):
        problems.append("no google_secret_manager_secret.resume")
    for name, body in model.of_type("google_secret_manager_secret_version").items():
        if "secret_data" in body:
            problems.append(
                f"google_secret_manager_secret_version.{name}: secret_data lands in the state"
            )
        if "secret_data_wo" not in body:
            problems.append(f"google_secret_manager_secret_version.{name}: use secret_data_wo")
    return problems


def check_retention(model: TerraformDir) -> list[str]:
    """A daily purge job calls /tasks/purge, and Firestore's TTL comes only after retention.

    TTL deletes only the execution document; if it ran first, the events and blobs would be
    left to no one.
    """
    problems: list[str] = []
    jobs = model.of_type("google_cloud_scheduler_job")
    purges = [
        b
        for b in jobs.values()
        if str((block(b, "http_target") or {}).get("uri", "")).endswith("/tasks/purge")
    ]
    if not purges:
        problems.append("no Cloud Scheduler job POSTs /tasks/purge")
    retention = resolve_number("${var.retention_days}", model)
    if retention is None:
        problems.append("variable retention_days has no numeric default")
    ttl = str(service_env(model).get("LOOM_TTL_DAYS", {}).get("value", ""))
    match = re.fullmatch(r"\$\{var\.retention_days \+ (\d+)\}", ttl)
    if match is None or int(match.group(1)) < 1:
        problems.append("LOOM_TTL_DAYS must be ${var.retention_days + N} with N >= 1")
    return problems


def check_caller_check(model: TerraformDir) -> list[str]:
    """The deployed services check their callers and hold a grant policy, by default.

    The worker and tasks services get ``LOOM_CALLER_AUTH=loom_gcp.auth:google_id_token``
    (on unless ``caller_check = false``, default true) with their audiences and principals
    (the worker: its own deterministic URL, its invokers' and operators' emails; tasks: its
    URL and the invoker account), Cloud Run's IAM trusted, and ``LOOM_GRANTS`` from
    ``var.grant_policy`` (default: nobody may grant anything).
    """
    problems: list[str] = []
    env = service_env(model)
    wanted = {
        "LOOM_CALLER_AUTH": ("loom_gcp.auth:google_id_token", "local.caller_checked"),
        "LOOM_AUTH_AUDIENCE": ("local.caller_audiences[each.key]",),
        "LOOM_AUTH_PRINCIPALS": ("local.caller_principals[each.key]",),
        "LOOM_AUTH_TRUST_CLOUD_RUN": ("true",),
        "LOOM_GRANTS": ("jsonencode(var.grant_policy)",),
    }
    for name, parts in wanted.items():
        value = str(env.get(name, {}).get("value", ""))
        if name not in env:
            problems.append(f"{name} is not set on the services")
        elif not all(part in value for part in parts):
            problems.append(f"{name} must be built from {' and '.join(parts)}, not {value!r}")
    if model.var_default("caller_check") is not True:
        problems.append("var.caller_check must default to true (the secure choice)")
    if model.var_default("grant_policy") != {"grants": []}:
        problems.append("var.grant_policy must default to no grants at all")
    checked = str(model.locals.get("caller_checked", ""))
    if not re.search(r'var\.caller_check \? \["worker", "tasks"\]', checked):
        problems.append("local.caller_checked must hold worker and tasks when var.caller_check")
    principals = model.locals.get("caller_principals", {})
    audiences = model.locals.get("caller_audiences", {})
    worker = str(principals.get("worker", "")) if isinstance(principals, dict) else ""
    for source in ("local.invoker_emails", "var.console_operators", "var.caller_principals"):
        if source not in worker:
            problems.append(f"the worker's principals must include {source}")
    if "var.worker_invokers" not in str(model.locals.get("invoker_emails", "")):
        problems.append("local.invoker_emails must come from var.worker_invokers")
    tasks = str(principals.get("tasks", "")) if isinstance(principals, dict) else ""
    if "google_service_account.invoker.email" not in tasks:
        problems.append("the tasks service's principal must be the invoker account")
    worker_aud = str(audiences.get("worker", "")) if isinstance(audiences, dict) else ""
    tasks_aud = str(audiences.get("tasks", "")) if isinstance(audiences, dict) else ""
    if "local.worker_url" not in worker_aud or "local.tasks_url" not in tasks_aud:
        problems.append("each service's audience must be its own deterministic URL")
    if not re.fullmatch(
        r"https://\$\{var\.name_prefix\}-worker-\$\{data\.google_project\.this\.number\}\.\$\{var\.region\}\.run\.app",
        str(model.locals.get("worker_url", "")),
    ):
        problems.append("local.worker_url must be the worker's deterministic run.app URL")
    return problems
