"""The newcomer's install: the base package serves the worker; missing extras are named.

A fresh virtualenv (no system site-packages) gets the project's wheel (``python -m build``,
installed with ``--no-deps``, not editable) and exactly its core dependencies, resolved from
``pyproject.toml`` through their own metadata and linked in from this interpreter's
site-packages (no index is needed, and no extra's library is there). In it, ``loom demo``
runs from a folder outside the checkout, ``loom serve`` and the ``functions-framework``
command answer ``/health``, and every optional backend says how to install its extra.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests import procs
from tests.deploy.terraform_model import REPO_ROOT

# Building takes minutes on a busy 2-core machine: more than the default timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def core_requirements() -> list[Requirement]:
    """``[project].dependencies`` of pyproject.toml."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [Requirement(dep) for dep in project["project"]["dependencies"]]


def closure(requirements: list[Requirement]) -> set[str]:
    """Names of the distributions the requirements need, transitively, without extras."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = req.name.lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        todo += [Requirement(r) for r in distribution(name).requires or []]
    return seen


def _files(name: str) -> Iterator[tuple[Path, Path]]:
    """(relative path, installed file) of a distribution, scripts left out.

    File by file, not directory by directory: namespace packages (``google``) are shared
    by many distributions, and only this one's files may show in the fresh venv.
    """
    dist = distribution(name)
    root = Path(str(dist.locate_file("")))
    for entry in dist.files or []:
        rel = Path(str(entry))
        if rel.parts[0] in {"..", "__pycache__", "bin"} or "__pycache__" in rel.parts:
            continue
        if (root / rel).is_file():
            yield rel, root / rel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built as a release is: ``python -m build --wheel``."""
    out = tmp_path_factory.mktemp("dist")
    # From a copy of what the wheel is built from: setuptools leaves build/ and egg-info
    # beside the sources, which must not land in the checkout.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO_ROOT / "functions", source / "functions", ignore=ignore)
    shutil.copytree(REPO_ROOT / "infra" / "loom_gcp", source / "infra" / "loom_gcp", ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [found] = out.glob("loom_cloudrun-*-py3-none-any.whl")
    return found


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A virtualenv with the project (its wheel, not editable) and its core dependencies only."""
    tmp = tmp_path_factory.mktemp("base-install")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    for name in sorted(closure(core_requirements())):
        for rel, source in _files(name):
            target = site / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(source)
    return venv


def _run(venv: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT.parent,  # not the checkout: only the installed package is importable
        check=False,
    )


def test_the_wheel_ships_the_demo_the_console_and_its_types(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as built:
        names = set(built.namelist())
    for needed in (
        "loom/examples/orders.py",
        "loom/examples/entity.py",
        "loom/workers/console/templates/execution.html",
        "loom/workers/console/static/console.js",
        "loom/workers/console/static/favicon.svg",
        "loom/py.typed",
        "loom_gcp/py.typed",
    ):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "examples/", "bench/")) for n in names)


def test_loom_demo_runs_outside_the_checkout(base_venv: Path, tmp_path: Path) -> None:
    """The newcomer's first command after a plain (not editable) install, from a folder
    that is not the checkout: the demo's flows come from the installed package."""
    elsewhere = tmp_path / "anywhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "PYTHON"))}
    done = subprocess.run(
        [str(base_venv / "bin" / "loom"), "demo"],
        cwd=elsewhere,
        env={**env, "VIRTUAL_ENV": str(base_venv), "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "demo flows completed: 4 of 4" in done.stdout
    assert list(elsewhere.iterdir()) == []  # its store was a temporary one, removed


def test_the_venv_has_no_extra_and_a_consistent_base(base_venv: Path) -> None:
    check = subprocess.run(
        [str(base_venv / "bin" / "python"), "-m", "pip", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    probe = _run(
        base_venv,
        "import importlib, json\n"
        "found = []\n"
        "for m in ('google.cloud.firestore', 'google.cloud.storage', 'google.cloud.tasks_v2',\n"
        "          'google.cloud.run_v2', 'google.auth', 'grpc', 'boto3', 'websockets'):\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "        found.append(m)\n"
        "    except ModuleNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(found))\n",
    )
    assert json.loads(probe.stdout) == [], probe.stderr


def test_import_loom_stays_light(base_venv: Path) -> None:
    probe = _run(
        base_venv,
        "import sys, loom, json; "
        "print(json.dumps(sorted(m for m in ('flask', 'functions_framework', 'werkzeug') "
        "if m in sys.modules)))",
    )
    assert json.loads(probe.stdout) == [], probe.stderr


def _serve_env(tmp_path: Path) -> dict[str, str]:
    return {
        "LOOM_APP": "loom.examples.orders:app",  # shipped in the wheel: no checkout needed
        "LOOM_STORE": f"sqlite:///{tmp_path / 'loom.db'}",
        "PYTHONPATH": "",
        "VIRTUAL_ENV": "",
    }


def test_loom_serve_answers_health(base_venv: Path, tmp_path: Path) -> None:
    port = procs.free_port()
    argv = [str(base_venv / "bin" / "loom"), "serve", "--port", str(port)]
    env = _serve_env(tmp_path)
    with procs.running(
        "loom serve",
        argv,
        port=port,
        log_path=tmp_path / "serve.log",
        env=env,
        ready_path="/health",
    ):
        pass


def test_functions_framework_command_answers_health(base_venv: Path, tmp_path: Path) -> None:
    # What the functions-framework console script runs (pip writes it from this entry point).
    script = (
        "import sys; from importlib.metadata import entry_points; "
        "(ep,) = entry_points(group='console_scripts', name='functions-framework'); "
        "sys.argv[0] = 'functions-framework'; sys.exit(ep.load()())"
    )
    port = procs.free_port()
    argv = [str(base_venv / "bin" / "python"), "-c", script]
    argv += ["--source", str(REPO_ROOT / "functions" / "main.py"), "--target", "worker"]
    argv += ["--port", str(port)]
    with procs.running(
        "functions-framework",
        argv,
        port=port,
        log_path=tmp_path / "ff.log",
        env={**_serve_env(tmp_path), "PYTHONPATH": str(REPO_ROOT)},
        ready_path="/health",
    ):
        pass


BACKENDS = {
    "firestore://": "from loom.config import open_store; open_store('firestore://p/db')",
    "gs://": "from loom.blobs import open_blob_store; open_blob_store('gs://bucket/x')",
    "s3://": "from loom.blobs import open_blob_store; open_blob_store('s3://bucket/x')",
    "cloudtasks://": (
        "from loom_gcp.bootstrap import open_dispatcher; "
        "open_dispatcher('cloudtasks://projects/p/locations/l/queues/q', None, {})"
    ),
    "cloudrun://": (
        "from loom_gcp.bootstrap import open_worker; "
        "open_worker('cloudrun://projects/p/locations/l/services/s', None)"
    ),
    "a2ui websockets": "import loom.plugins.a2ui.websocket",
}
EXTRA = {"s3://": "s3", "a2ui websockets": "a2ui"}


@pytest.mark.parametrize("backend", list(BACKENDS), ids=list(BACKENDS))
def test_a_missing_backend_names_its_extra(base_venv: Path, backend: str) -> None:
    code = (
        "from loom.errors import MissingExtraError\n"
        f"try:\n    {BACKENDS[backend]}\n"
        "except MissingExtraError as exc:\n    print(exc)\n"
    )
    result = _run(base_venv, code)
    extra = EXTRA.get(backend, "gcp")
    assert result.returncode == 0, result.stderr
    assert f"pip install '.[{extra}]' in a checkout of Loom" in result.stdout, result.stdout
    wheel = f"loom_cloudrun-{distribution('loom-cloudrun').version}-py3-none-any.whl[{extra}]"
    assert wheel in result.stdout, result.stdout
    # Loom is on no package index: no hint may send anyone to a name someone else can take.
    assert "pip install 'loom-cloudrun" not in result.stdout


def test_the_closure_is_resolved_from_real_metadata() -> None:
    names = closure(core_requirements())
    # The worker's own stack comes with the base install.
    assert {"functions-framework", "flask", "werkzeug", "gunicorn", "pydantic"} <= names
    assert not {n for n in names if n.startswith("google-cloud")}
    with pytest.raises(PackageNotFoundError):
        closure([Requirement("no-such-distribution-xyz")])
    assert os.sep not in "".join(names)
