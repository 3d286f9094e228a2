"""``loom serve``: the worker on real HTTP beside the CLI, on one embedded store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.functions.conftest import APP_REF, BEARER, REPO, SECRET

pytestmark = pytest.mark.slow


def _loom(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loom", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_serve_shares_the_store_with_the_cli(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'loom.db'}"
    env = {"PYTHONPATH": str(REPO), "LOOM_RESUME_SECRET": SECRET, "LOOM_TEST_DIR": ""}
    port = procs.free_port()
    argv = [
        sys.executable,
        "-m",
        "loom",
        "--app",
        APP_REF,
        "--store",
        store,
        "serve",
        "--port",
        str(port),
    ]
    with procs.running(
        "loom-serve",
        argv,
        port=port,
        log_path=tmp_path / "serve.log",
        ready_path="/health",
        env=env,
    ) as server:
        base = f"http://{server.host}"
        started = httpx.post(
            f"{base}/executions", json={"flow": "gated", "input": {"n": 1}, "execution_id": "cli-1"}
        )
        assert started.status_code == 200
        assert started.json()["status"] == "suspended"
        # The CLI sees what the server wrote, and its resume is run by the CLI itself.
        shown = _loom("--app", APP_REF, "--store", store, "show", "cli-1", "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["status"] == "suspended"
        resumed = httpx.post(
            f"{base}/executions/cli-1/resume",
            headers=BEARER,
            json={"on": "go", "correlation_key": "cli-1:go", "payload": {"name": "gus"}},
        )
        assert resumed.status_code == 200
        assert resumed.json()["output"]["greeting"] == "hello gus"
        assert httpx.get(f"{base}/executions/nope").json()["code"] == "unknown_execution"
    lines = [json.loads(x) for x in server.log_path.read_text().splitlines() if x[:1] == "{"]
    assert {"POST /executions 200", "POST /executions/cli-1/resume 200"} <= {
        x["message"] for x in lines
    }


def test_serve_with_a_bad_app_fails_at_once(tmp_path: Path) -> None:
    done = _loom(
        "--app",
        "no_such_module:app",
        "--store",
        f"sqlite:///{tmp_path / 'x.db'}",
        "serve",
        "--port",
        str(procs.free_port()),
        env={},
    )
    assert done.returncode == 1
    assert "error: cannot import app module 'no_such_module'" in done.stderr
