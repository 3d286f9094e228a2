"""Every Cloud Build step runs in an image that has the tools the step calls.

No Cloud Build here, so this is a model: what each image a step may name provides (from
the images' own Dockerfiles and documentation), what an image built by an earlier step
adds to its base, and what each command needs. ``runtime-python`` is the service's Python:
whatever ``_PYTHON_IMAGE`` is, which the runtime image is built from too.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from tests.deploy.terraform_model import REPO_ROOT
from tests.deploy.test_cloudbuild import CLOUDBUILD, _text
from tests.deploy.test_dockerfile import parse_dockerfile

RUNTIME_PYTHON = "runtime-python"
EMULATORS = "gcr.io/google.com/cloudsdktool/google-cloud-cli:emulators"

# What the images a step may name bring (the SDK images' Dockerfiles; the cloud builders).
IMAGE_TOOLS: dict[str, set[str]] = {
    "${_PYTHON_IMAGE}": {"bash", RUNTIME_PYTHON},
    "gcr.io/cloud-builders/docker": {"docker"},
    "gcr.io/google.com/cloudsdktool/google-cloud-cli:slim": {"bash", "gcloud"},
    # Its Python is the SDK's (3.13 today), not the service's; it has no terraform.
    EMULATORS: {"bash", "gcloud", "java", "firestore-emulator", "pubsub-emulator", "python3.13"},
}

# What a Dockerfile's instructions add, by a pattern found in them.
INSTALLS: dict[str, str] = {
    "terraform": r"/bin/terraform|\bterraform\b.*apt-get install|install .*\bterraform\b",
    "java": r"openjdk-\d+-jre|default-jre",
    "npm": r"\bnpm\b",
    "gcloud": r"google-cloud-cli[=\"\s]",
    "firestore-emulator": r"google-cloud-cli-firestore-emulator",
    "pubsub-emulator": r"google-cloud-cli-pubsub-emulator",
    # The runtime image's final stage takes the virtualenv the build stage installed the
    # project into, console script `loom` included.
    "loom": r"COPY --from=\S+ /opt/venv",
}

# .ci/run: install with pip, fetch the A2UI schemas with npm, lint, types, the offline checks
# (terraform fmt), then the suite, which starts the Firestore and Pub/Sub emulators on Java.
CI_RUN_NEEDS = {
    "bash",
    RUNTIME_PYTHON,
    "npm",
    "terraform",
    "java",
    "gcloud",
    "firestore-emulator",
    "pubsub-emulator",
}


def _load() -> dict[str, Any]:
    return yaml.safe_load(CLOUDBUILD.read_text(encoding="utf-8"))


def _build_args(args: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for index, arg in enumerate(args):
        if arg.startswith("--build-arg="):
            key, _, value = arg[len("--build-arg=") :].partition("=")
            found[key] = value
        elif arg == "--build-arg" and index + 1 < len(args):
            key, _, value = args[index + 1].partition("=")
            found[key] = value
    return found


def built_image_tools(step: dict[str, Any], tools: dict[str, set[str]]) -> tuple[str, set[str]]:
    """The tag a ``docker build`` step makes and the tools of that image."""
    args = [str(a) for a in step.get("args", [])]
    tag = next(a.split("=", 1)[1] for a in args if a.startswith("--tag="))
    dockerfile = next(a.split("=", 1)[1] for a in args if a.startswith("--file="))
    instructions = parse_dockerfile((REPO_ROOT / dockerfile).read_text(encoding="utf-8"))
    defaults = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.args:
            name, _, default = ins.args.partition("=")
            defaults[name] = default
    defaults |= _build_args(args)
    final = max(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    base = instructions[final].args.split()[0]
    base = re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), base)
    provided = set(tools.get(base, set()))
    text = "\n".join(f"{ins.keyword} {ins.args}" for ins in instructions[final:])
    provided |= {tool for tool, pattern in INSTALLS.items() if re.search(pattern, text)}
    return tag, provided


def needs(step: dict[str, Any]) -> set[str]:
    """The tools a step's command line calls."""
    text = " ".join([str(step.get("entrypoint", "")), _text(step)])
    args = [str(a) for a in step.get("args", [])]
    wanted: set[str] = set()
    if step.get("entrypoint") == "bash":
        wanted.add("bash")
    if str(step.get("entrypoint", "")).split("/")[-1] == "loom":
        wanted.add("loom")
    if "bash .ci/run" in text:
        wanted |= CI_RUN_NEEDS
    if re.search(r"\b(pip|ruff|pyright|python)\b", text):
        wanted.add(RUNTIME_PYTHON)
    if args[:1] in (["build"], ["push"]):
        wanted.add("docker")
    if "gcloud " in text:
        wanted.add("gcloud")
    return wanted


def _resolve(image: str, subs: dict[str, str]) -> str:
    """User substitutions resolved, but the service's Python kept by name."""
    return re.sub(
        r"\$\{(_\w+)\}",
        lambda m: m.group(0) if m.group(1) == "_PYTHON_IMAGE" else subs.get(m.group(1), ""),
        image,
    )


def tool_problems(config: dict[str, Any]) -> list[str]:
    """Steps whose image lacks a tool they call; empty when every step can run."""
    tools = copy.deepcopy(IMAGE_TOOLS)
    subs: dict[str, str] = config.get("substitutions", {})
    problems: list[str] = []
    for step in config.get("steps", []):
        name = _resolve(str(step.get("name")), subs)
        if name not in tools:
            problems.append(f"step {step.get('id')}: image {name} is neither known nor built")
            continue
        missing = needs(step) - tools[name]
        if missing:
            problems.append(f"step {step.get('id')}: image {name} lacks {sorted(missing)}")
        if name == "gcr.io/cloud-builders/docker" and _text(step).startswith("build"):
            tag, provided = built_image_tools(step, tools)
            tools[_resolve(tag, subs)] = provided
    return problems


def test_every_step_image_has_the_tools_the_step_runs() -> None:
    assert tool_problems(_load()) == []


def _called(script: str, tool: str) -> bool:
    return re.search(rf"^[^#\n]*\b{tool}\b", script, re.MULTILINE) is not None


def test_the_model_knows_every_tool_ci_run_calls() -> None:
    """Tools outside Python that .ci/run (or the offline checks it runs) calls are needed."""
    ci_run = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    offline = (REPO_ROOT / "infra" / "scripts" / "offline_checks.sh").read_text(encoding="utf-8")
    assert "infra/scripts/offline_checks.sh" in ci_run
    assert _called(offline, "terraform fmt")
    for tool in ("terraform", "npm", "node", "java", "gcloud", "docker"):
        if _called(ci_run, tool) or _called(offline, tool):
            assert tool in CI_RUN_NEEDS, f".ci/run calls {tool}; the model must need it"


def _tests_on_emulators_image(config: dict[str, Any]) -> None:
    step = next(s for s in config["steps"] if s["id"] == "tests")
    step["name"] = EMULATORS


def _ci_image_on_another_python(config: dict[str, Any]) -> None:
    step = next(s for s in config["steps"] if s["id"] == "ci-image")
    step["args"] = [a for a in step["args"] if not str(a).startswith("--build-arg=PYTHON")]
    step["args"].insert(1, "--build-arg=PYTHON_IMAGE=python:3.13-slim")


def _deploy_on_python(config: dict[str, Any]) -> None:
    next(s for s in config["steps"] if s["id"] == "deploy")["name"] = "${_PYTHON_IMAGE}"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_tests_on_emulators_image, "lacks ['npm', 'runtime-python', 'terraform']"),
        (_ci_image_on_another_python, "lacks ['runtime-python']"),
        (_deploy_on_python, "lacks ['gcloud']"),
    ],
    ids=["tests-on-emulators-image", "ci-image-other-python", "deploy-without-gcloud"],
)
def test_tool_checker_catches(mutate: Any, expected: str) -> None:
    config = _load()
    mutate(config)
    problems = tool_problems(config)
    assert any(expected in p for p in problems), problems


def _declared_args(dockerfile: str) -> set[str]:
    text = (REPO_ROOT / dockerfile).read_text(encoding="utf-8")
    return {ins.args.split("=")[0] for ins in parse_dockerfile(text) if ins.keyword == "ARG"}


def python_image_problems(config: dict[str, Any]) -> list[str]:
    """Image builds that do not get ``_PYTHON_IMAGE`` as their PYTHON_IMAGE build arg."""
    problems: list[str] = []
    for step in config.get("steps", []):
        args = [str(a) for a in step.get("args", [])]
        if step.get("name") != "gcr.io/cloud-builders/docker" or args[:1] != ["build"]:
            continue
        dockerfile = next(a.split("=", 1)[1] for a in args if a.startswith("--file="))
        if "PYTHON_IMAGE" not in _declared_args(dockerfile):
            problems.append(f"{dockerfile} declares no ARG PYTHON_IMAGE")
        if _build_args(args).get("PYTHON_IMAGE") != "${_PYTHON_IMAGE}":
            problems.append(f"step {step.get('id')} does not pass PYTHON_IMAGE=${{_PYTHON_IMAGE}}")
    return problems


def test_python_image_reaches_every_image_build() -> None:
    assert python_image_problems(_load()) == []
    builds = [s["id"] for s in _load()["steps"] if _text(s).startswith("build")]
    assert builds == ["ci-image", "build"]


def test_python_image_checker_catches_a_build_without_it() -> None:
    config = _load()
    step = next(s for s in config["steps"] if s["id"] == "build")
    step["args"] = [a for a in step["args"] if "PYTHON_IMAGE" not in str(a)]
    assert python_image_problems(config) == [
        "step build does not pass PYTHON_IMAGE=${_PYTHON_IMAGE}"
    ]
