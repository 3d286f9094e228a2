"""The real image: built from infra/Dockerfile with podman, run as Cloud Run runs it.

No container registry is reachable, so the base image is made from Debian packages
(``infra/scripts/podman_base_image.sh``: mmdebstrap, bookworm's Python 3.11) and passed
through the ``PYTHON_IMAGE`` build arg; the Dockerfile itself is unchanged. The container
runs as the image's non-root user with the env Terraform sets on the worker service, SQLite
on a volume standing in for Firestore (no Cloud Tasks: control calls run inline), and
serves one order from the shipped example: health, start, resume, the timer's execute,
completion; then ``podman stop`` ends it cleanly. The test removes the container, the
image and the build's dangling layers; the base image and its tarball stay cached.

It runs only when asked, ``LOOM_CONTAINER_TESTS=1`` (``bash .ci/run`` asks wherever it can run
it), so ``python -m pytest tests/deploy`` stays a quick offline check; select or leave it out
by its mark, ``-m container``. Needs root, podman, runc and mmdebstrap (``.ci/run`` installs
them as root); ``LOOM_CONTAINER_TESTS=0`` skips it where containers cannot run (inside a
build step).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import procs
from tests.deploy.local_env import terraform_env
from tests.deploy.terraform_model import REPO_ROOT

# Building an image takes minutes on a busy 2-core machine: more than the default timeout.
pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(1200)]

NOT_ASKED = (
    "builds and runs the image (minutes): run it with LOOM_CONTAINER_TESTS=1 "
    "(bash .ci/run sets it where it can)"
)
SERVICE_UID = 10001
SECRET = "container-test-resume-secret"


def _unavailable() -> str | None:
    asked = os.environ.get("LOOM_CONTAINER_TESTS")
    if asked == "0":
        return "LOOM_CONTAINER_TESTS=0"
    if asked != "1":
        return NOT_ASKED
    missing = [tool for tool in ("podman", "runc", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install -y podman runc mmdebstrap)"
    if os.geteuid() != 0:
        return "mmdebstrap's root mode needs root"
    return None


@pytest.fixture(scope="module")
def podman_env() -> dict[str, str]:
    """CONTAINERS_CONF and PYTHON_IMAGE from the base-image script (cached after one run)."""
    reason = _unavailable()
    if reason is not None:
        required = os.environ.get("LOOM_REQUIRE_EMULATORS") == "1"
        if required and reason not in ("LOOM_CONTAINER_TESTS=0", NOT_ASKED):
            pytest.fail(reason)  # asked for, and it cannot run: on CI that is a failure
        pytest.skip(reason)
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "scripts" / "podman_base_image.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    env: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    assert set(env) == {"CONTAINERS_CONF", "PYTHON_IMAGE"}, result.stdout
    return env


def _podman(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    result = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode == 0, f"podman {args[0]}: {result.stderr[-4000:]}"
    return result.stdout.strip()


@pytest.fixture(scope="module")
def image(podman_env: dict[str, str]) -> Iterator[str]:
    """The image built from infra/Dockerfile; removed with its dangling layers afterwards."""
    tag = f"localhost/loom-test:{uuid.uuid4().hex[:12]}"
    try:
        _podman(
            podman_env,
            "build",
            "--pull=never",
            "--build-arg",
            f"PYTHON_IMAGE={podman_env['PYTHON_IMAGE']}",
            "--file",
            str(REPO_ROOT / "infra" / "Dockerfile"),
            "--tag",
            tag,
            str(REPO_ROOT),
            timeout=900,
        )
        yield tag
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], env={**os.environ, **podman_env}, check=False)
        subprocess.run(
            ["podman", "image", "prune", "-f"], env={**os.environ, **podman_env}, check=False
        )


def _call(url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _wait_healthy(url: str, podman_env: dict[str, str], name: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if _call(f"{url}/health")[0] == 200:
                return
        except (urllib.error.URLError, OSError, json.JSONDecodeError):
            pass
        time.sleep(0.2)
    logs = subprocess.run(
        ["podman", "logs", name], capture_output=True, text=True, env={**os.environ, **podman_env}
    )
    pytest.fail(f"/health did not answer:\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}")


def _service_env() -> dict[str, str]:
    env, _ = terraform_env(
        {
            "LOOM_APP": "examples.orders:app",
            "LOOM_STORE": "sqlite:////data/loom.db",
            "LOOM_BLOBS": "file:///data/blobs",
            "LOOM_RESUME_SECRET": SECRET,
        }
    )
    return {**env, "K_SERVICE": "loom-worker"}  # Cloud Run sets it on every service


@pytest.fixture
def container(image: str, podman_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A running container of the image (name, base URL); always removed."""
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, SERVICE_UID, SERVICE_UID)  # the volume belongs to the service user
    name = f"loom-test-{uuid.uuid4().hex[:12]}"
    port = procs.free_port()
    env_args = [arg for k, v in _service_env().items() for arg in ("--env", f"{k}={v}")]
    _podman(
        podman_env,
        "run",
        "--detach",
        "--name",
        name,
        "--publish",
        f"127.0.0.1:{port}:8080",
        "--volume",
        f"{data}:/data",
        *env_args,
        image,
    )
    try:
        yield name, f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(["podman", "rm", "-f", name], env={**os.environ, **podman_env}, check=False)


def test_the_image_serves_an_order_to_completion_and_stops_cleanly(
    container: tuple[str, str], podman_env: dict[str, str]
) -> None:
    name, url = container
    _wait_healthy(url, podman_env, name)
    assert _podman(podman_env, "exec", name, "id", "-u") == str(SERVICE_UID)

    order = {"order_id": "o-1", "items": ["book", "pen"], "cooling_off_s": 1.0}
    status, started = _call(
        f"{url}/executions",
        {
            "flow": "order.fulfil",
            "execution_id": "o-1",
            "capabilities": ["payments"],
            "input": order,
        },
        {"Authorization": f"Bearer {SECRET}"},  # the example's grant policy: secret holders
    )
    assert (status, started["status"]) == (200, "suspended"), started
    gate = started["waiting_on"][0]
    status, resumed = _call(
        f"{url}/executions/o-1/resume",
        {"on": gate["on"], "correlation_key": gate["correlation_key"], "payload": {"by": "ann"}},
        {"Authorization": f"Bearer {SECRET}"},
    )
    assert (status, resumed["waiting_on"][0]["on"]) == (200, "loom.timer"), resumed
    time.sleep(max(0.0, resumed["waiting_on"][0]["wake_at"] - time.time()) + 0.3)
    status, executed = _call(
        f"{url}/execute", {"executionPackage": {"execution_id": "o-1", "reason": "timer"}}
    )
    assert (status, executed["status"]) == (200, "completed"), executed
    assert executed["output"]["approved_by"] == "ann"
    status, view = _call(f"{url}/executions/o-1")
    assert view["execution"]["status"] == "completed", view

    began = time.monotonic()
    _podman(podman_env, "stop", "--time", "20", name, timeout=60)
    stopped_in = time.monotonic() - began
    state = json.loads(_podman(podman_env, "inspect", "--format", "{{json .State}}", name))
    logs = subprocess.run(
        ["podman", "logs", name], capture_output=True, text=True, env={**os.environ, **podman_env}
    )
    output = logs.stdout + logs.stderr
    assert state["ExitCode"] == 0 and stopped_in < 15, (state, output[-3000:])
    for problem in ("Control server error", "Traceback", "Permission denied"):
        assert problem not in output, output[-3000:]
