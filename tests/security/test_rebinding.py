"""DNS rebinding against a loopback-only worker: a page of another site whose name now
resolves to 127.0.0.1 sends its own name as ``Host``. ``loom serve`` (no caller check)
answers such a request on no route: reads, starts, messages, dead letters and the console
are all refused (403 ``foreign_host``; the console, 401 with a page) with nothing read or written; only the probes and the
OpenAPI document, which reveal nothing, answer any ``Host``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from loom.runtime import Runtime
from tests import procs
from tests.functions.conftest import APP_REF, BEARER, REPO, SECRET

pytestmark = pytest.mark.slow


def test_a_foreign_host_reaches_no_route_of_loom_serve(tmp_path: Path, runtime: Runtime) -> None:
    store = runtime.store
    port = procs.free_port()
    argv = [sys.executable, "-m", "loom", "--app", APP_REF, "--store"]
    argv += [f"sqlite:///{tmp_path / 'loom.db'}", "serve", "--port", str(port)]
    env = {"PYTHONPATH": str(REPO), "LOOM_RESUME_SECRET": SECRET, "LOOM_TEST_DIR": ""}
    with procs.running(
        "loom-serve",
        argv,
        port=port,
        log_path=tmp_path / "serve.log",
        ready_path="/health",
        env=env,
    ) as server:
        base = f"http://{server.host}"
        own = httpx.post(
            f"{base}/executions", json={"flow": "echo", "input": {"n": 1}, "execution_id": "mine"}
        )
        assert own.status_code == 200, own.text
        evil = {"Host": f"attacker.example:{port}", **BEARER}
        for method, path, body in [
            ("GET", "/executions/mine", None),
            ("POST", "/executions", {"flow": "echo", "input": {"n": 2}, "execution_id": "evil"}),
            ("POST", "/executions/mine/messages", {"topic": "t", "payload": 1}),
            ("GET", "/dead-letters?status=failed", None),
            ("POST", "/dead-letters/retry", {"status": "failed"}),
            ("GET", "/executions/mine/events/count", None),
            ("GET", "/versions", None),
            ("POST", "/execute", {"executionPackage": {"execution_id": "mine"}}),
        ]:
            answer = httpx.request(method, f"{base}{path}", json=body, headers=evil, timeout=30)
            assert answer.status_code == 403, (path, answer.text)
            assert answer.json()["code"] == "foreign_host"
            assert "mine" not in answer.text or path == "/executions/mine"  # echoes no data
        page = httpx.get(f"{base}/console/executions", headers=evil, timeout=30)
        assert page.status_code == 401 and "mine" not in page.text  # the console's own rule
        for path in ("/health", "/live", "/openapi.json"):
            assert httpx.get(f"{base}{path}", headers=evil, timeout=30).status_code == 200
        # Loopback names answer as before, with or without a port.
        for host in ("localhost", f"127.0.0.1:{port}", f"[::1]:{port}", "app.localhost"):
            ok = httpx.get(f"{base}/executions/mine", headers={"Host": host}, timeout=30)
            assert ok.status_code == 200, (host, ok.text)
    rows = asyncio.run(store.list(limit=100))
    assert [r.execution_id for r in rows] == ["mine"]
    assert [e.type for e in asyncio.run(store.read("mine"))][-1] == "ExecutionCompleted"
