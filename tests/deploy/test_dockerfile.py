"""Shape of infra/Dockerfile and .dockerignore (no Docker engine here; Cloud Build builds it)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass

import pytest

from tests.deploy.terraform_model import REPO_ROOT

DOCKERFILE = REPO_ROOT / "infra" / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
CONSTRAINTS = "infra/constraints.txt"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip()))
    return instructions


def _env_pairs(args: str) -> dict[str, str]:
    if "=" not in args.split()[0]:
        key, _, value = args.partition(" ")
        return {key: value.strip()}
    return dict(token.split("=", 1) for token in shlex.split(args))


def dockerfile_problems(text: str) -> list[str]:
    """Everything wrong with the Dockerfile's shape; empty when it is right."""
    problems: list[str] = []
    instructions = parse_dockerfile(text)
    args: dict[str, str] = {}
    stages: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "ARG" and not stages:
            name, _, default = ins.args.partition("=")
            args[name] = default
        if ins.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    if not stages:
        return ["no FROM"]

    for stage in stages:
        image = stage[0].args.split()[0]
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
        if not re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image):
            problems.append(f"base image {image!r} must be python:3.11-slim with the minor pinned")

    final = stages[-1]
    env: dict[str, str] = {}
    for ins in final:
        if ins.keyword == "ENV":
            env.update(_env_pairs(ins.args))
    for key, value in {
        "FUNCTION_TARGET": "worker",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }.items():
        if env.get(key) != value:
            problems.append(f"runtime stage must set ENV {key}={value}")

    users = [i for i, ins in enumerate(final) if ins.keyword == "USER"]
    if not users:
        problems.append("runtime stage has no USER: it would run as root")
    else:
        user = final[users[-1]].args.split(":")[0]
        if user in {"root", "0"}:
            problems.append("runtime stage must not run as root")
        if any(ins.keyword == "RUN" for ins in final[users[-1] :]):
            problems.append("USER must come after the last RUN")

    entrypoints = [ins for ins in final if ins.keyword == "ENTRYPOINT"]
    if not entrypoints:
        problems.append("no ENTRYPOINT")
    else:
        try:
            argv = json.loads(entrypoints[-1].args)
        except json.JSONDecodeError:
            argv = None
            problems.append("ENTRYPOINT must use the exec (JSON) form")
        if isinstance(argv, list):
            command = " ".join(str(a) for a in argv)
            if argv[:2] == ["/bin/sh", "-c"] and not command.split("-c", 1)[1].strip().startswith(
                "exec "
            ):
                problems.append("sh -c ENTRYPOINT must exec functions-framework (signals)")
            for needle in (
                "functions-framework",
                "--source functions/main.py",
                "--target",
                "$FUNCTION_TARGET",
                "--port",
                "$PORT",
            ):
                if needle not in command:
                    problems.append(f"ENTRYPOINT lacks {needle!r}")

    everything = instructions
    if not any(ins.keyword == "COPY" and CONSTRAINTS in ins.args for ins in everything):
        problems.append(f"{CONSTRAINTS} is never copied into the image")
    installs = [
        ins.args for ins in everything if ins.keyword == "RUN" and "pip install" in ins.args
    ]
    if not any(
        re.search(rf"(--constraint|-c)[ =]{re.escape(CONSTRAINTS)}", run)
        and re.search(r"pip wheel --no-deps --wheel-dir (\S+) \.", run)
        and re.search(r"loom_cloudrun-\*\.whl\)?\"?\[gcp\]", run)
        for run in installs
    ):
        problems.append(
            f"the package is not installed from its wheel with [gcp] and --constraint {CONSTRAINTS}"
        )
    return problems


def test_dockerfile_has_the_expected_shape() -> None:
    assert dockerfile_problems(DOCKERFILE.read_text(encoding="utf-8")) == []


BREAKAGES = {
    "latest-base": (
        "ARG PYTHON_IMAGE=python:3.11-slim-bookworm",
        "ARG PYTHON_IMAGE=python:latest",
        "base image",
    ),
    "other-python": (
        "ARG PYTHON_IMAGE=python:3.11-slim-bookworm",
        "ARG PYTHON_IMAGE=python:3-slim",
        "base image",
    ),
    "root-user": ("USER 10001:10001", "USER root", "root"),
    "no-user": ("USER 10001:10001", "", "no USER"),
    "no-target": ("FUNCTION_TARGET=worker", "FUNCTION_TARGET=tasks", "FUNCTION_TARGET"),
    "bytecode": (
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONDONTWRITEBYTECODE=0",
        "PYTHONDONTWRITEBYTECODE",
    ),
    "no-exec": ('"exec functions-framework', '"functions-framework', "exec"),
    "fixed-port": ('--port \\"$PORT\\"', "--port 8080", "$PORT"),
    "shell-form": (
        'ENTRYPOINT ["/bin/sh", "-c", ',
        "ENTRYPOINT functions-framework --source functions/main.py # ",
        "exec (JSON) form",
    ),
    "no-constraints": ('--constraint infra/constraints.txt "$(echo', '"$(echo', "--constraint"),
    "source-not-wheel": (
        '"$(echo /wheels/loom_cloudrun-*.whl)[gcp]"',
        '".[gcp]"',
        "from its wheel",
    ),
    "no-wheel-built": ("pip wheel --no-deps --wheel-dir /wheels . ", "true ", "from its wheel"),
    "constraints-not-copied": (
        "COPY infra/constraints.txt infra/constraints.txt",
        "",
        "never copied",
    ),
}


@pytest.mark.parametrize(("old", "new", "expected"), list(BREAKAGES.values()), ids=list(BREAKAGES))
def test_dockerfile_checker_catches(old: str, new: str, expected: str) -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert old in text
    problems = dockerfile_problems(text.replace(old, new))
    assert any(expected in p for p in problems), problems


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, simplified: the last matching pattern wins; a parent match covers children."""
    result = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(prefix.split("/")[-1], pattern[3:])
            ):
                result = not negate
                break
    return result


def _dockerignore() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "functions/main.py",
        "functions/loom/events.py",
        "infra/loom_gcp/firestore.py",
        CONSTRAINTS,
        "infra/Dockerfile",
    ],
)
def test_dockerignore_keeps_what_the_image_needs(path: str) -> None:
    assert not _ignored(path, _dockerignore())


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        ".venv-checkov/bin/python",
        ".venv/bin/python",
        "tests/deploy/test_dockerfile.py",
        "terraform/modules/loom/run.tf",
        "functions/loom/__pycache__/events.cpython-311.pyc",
        "functions/loom_cloudrun.egg-info/PKG-INFO",
    ],
)
def test_dockerignore_drops_what_the_image_does_not_need(path: str) -> None:
    assert _ignored(path, _dockerignore())


def test_constraints_pin_every_runtime_dependency() -> None:
    import tomllib

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    wanted = list(project["dependencies"]) + list(project["optional-dependencies"]["gcp"])
    names = {
        re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower().replace("_", "-") for dep in wanted
    }
    pins: dict[str, str] = {}
    for line in (REPO_ROOT / CONSTRAINTS).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), f"not pinned: {line}"
        pins[name.lower().replace("_", "-")] = version
    assert names <= set(pins), sorted(names - set(pins))
    assert "loom-cloudrun" not in pins
