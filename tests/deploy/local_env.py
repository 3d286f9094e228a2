"""The container's command line and the environment Terraform gives it, for local runs.

The container test and ``bench/concurrency.py`` run the service as Cloud Run does: the
Dockerfile's ENTRYPOINT with the runtime stage's ENV, overlaid by the Cloud Run service's
``env`` blocks from ``terraform/modules/loom/run.tf`` (variables at their defaults). What
only exists in Google Cloud (Firestore, Cloud Tasks, the bucket, Secret Manager) is
replaced by a local stand-in the caller names, or dropped: with no ``LOOM_DISPATCH`` control
calls run inline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from tests.deploy import terraform_model as tm
from tests.deploy.test_dockerfile import DOCKERFILE, _env_pairs, parse_dockerfile

_VAR = re.compile(r"\$\{var\.(\w+)\}")


def entrypoint_argv() -> list[str]:
    """The runtime stage's ENTRYPOINT (exec form) followed by its CMD, if any."""
    instructions = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))
    argv: list[str] = []
    for keyword in ("ENTRYPOINT", "CMD"):
        found = [ins for ins in instructions if ins.keyword == keyword]
        if found:
            argv += [str(a) for a in json.loads(found[-1].args)]
    return argv


def image_env() -> dict[str, str]:
    """ENV of the Dockerfile's last (runtime) stage, without ``$VAR`` expansions."""
    instructions = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))
    last_from = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    env: dict[str, str] = {}
    for ins in instructions[last_from:]:
        if ins.keyword == "ENV":
            env.update(_env_pairs(ins.args))
    return {k: v for k, v in env.items() if "$" not in v}


def _resolve(value: object, model: tm.TerraformDir, target: str) -> str | None:
    """A Terraform env value with ``var.*`` at its default; ``None`` if it names cloud things."""
    text = str(value).replace("${each.key}", target)

    def default(match: re.Match[str]) -> str:
        found = model.var_default(match.group(1)) if match.group(1) in model.variables else None
        return "${unresolved}" if found is None else str(found)

    text = _VAR.sub(default, text)
    return None if "${" in text else text


def terraform_env(
    local: Mapping[str, str], *, target: str = "worker"
) -> tuple[dict[str, str], list[str]]:
    """The env Terraform sets on the ``target`` service, made runnable here.

    Args:
        local: Stand-ins for names whose Terraform value only exists in Google Cloud
            (``LOOM_STORE``, ``LOOM_BLOBS``, ``LOOM_RESUME_SECRET``...); they win.
        target: The service (``FUNCTION_TARGET``).

    Returns:
        The environment, and the names dropped because they name cloud resources.
    """
    model = tm.load_dir(tm.MODULE_DIR)
    env: dict[str, str] = {}
    dropped: list[str] = []
    for name, block in tm.service_env(model).items():
        if name in local:
            env[name] = local[name]
            continue
        value = _resolve(block.get("value"), model, target) if "value" in block else None
        if value is None:
            dropped.append(name)
        else:
            env[name] = value
    env.update({k: v for k, v in local.items() if k not in env})
    return env, sorted(dropped)
