"""App-level authentication on every route: the caller's Google-signed ID token, verified by
the worker itself behind Cloud Run IAM.

No real Google token issuer exists offline, so this test is the issuer: it makes an RSA key
and a self-signed certificate, serves the certificate on loopback in Google's format
(``{key id: PEM}``) and points the worker's check at it with ``LOOM_AUTH_CERTS_URL``. The
check itself (``loom_gcp.auth``) is the production code: google-auth verifies signature,
audience and expiry, and Loom checks issuer, verified email and the allowed principals. The
worker is a real functions-framework process on loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom.errors import UnknownExecutionError
from loom.events import ExecutionResumed, ExecutionStarted
from loom.runtime import Runtime
from loom.workers.auth import sign
from tests import procs
from tests.functions.conftest import APP_REF, REPO, SECRET, WorkerFactory
from tests.functions.helpers import history
from tests.security.id_tokens import AUDIENCE, OPS, Issuer

pytestmark = pytest.mark.slow


@pytest.fixture
def guarded(workers: WorkerFactory, issuer: Issuer) -> procs.Server:
    return workers(
        LOOM_CALLER_AUTH="loom_gcp.auth:google_id_token",
        LOOM_AUTH_AUDIENCE=AUDIENCE,
        LOOM_AUTH_PRINCIPALS=f"{OPS}, someone@example.com",
        LOOM_AUTH_CERTS_URL=issuer.certs_url,
    )


def call(
    server: procs.Server, method: str, path: str, body: Any = None, **kw: Any
) -> httpx.Response:
    return httpx.request(method, f"http://{server.host}{path}", json=body, timeout=30, **kw)


def exists(runtime: Runtime, eid: str) -> bool:
    import asyncio

    try:
        asyncio.run(runtime.require(eid))
    except UnknownExecutionError:
        return False
    return True


ROUTES = [
    ("POST", "/executions", {"flow": "echo", "input": {"n": 1}, "execution_id": "x-1"}),
    ("POST", "/execute", {"executionPackage": {"execution_id": "x-1"}}),
    ("GET", "/executions/x-1", None),
    ("POST", "/executions/x-1/resume", {"on": "go", "correlation_key": "k"}),
    ("POST", "/executions/x-1/verdict", {"step_id": "1", "episode": 3, "verdict": "failed"}),
    ("POST", "/executions/x-1/cancel", {"reason": "stop"}),
    ("POST", "/executions/x-1/messages", {"topic": "t", "payload": 1}),
    ("GET", "/executions/x-1/events/k", None),
]


def test_every_route_needs_a_valid_id_token(
    guarded: procs.Server, issuer: Issuer, runtime: Runtime
) -> None:
    assert call(guarded, "GET", "/health").status_code == 200  # probes carry no token
    for method, path, body in ROUTES:
        response = call(guarded, method, path, body)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["code"] == "unauthenticated"
    now = int(time.time())
    bad_tokens = {
        "another audience": issuer.token(aud="https://another-service.a.run.app"),
        "expired": issuer.token(iat=now - 7200, exp=now - 3600),
        "not Google's issuer": issuer.token(iss="https://evil.example.com"),
        "someone not allowed": issuer.token(email="mallory@example.com"),
        "an unverified email": issuer.token(email_verified=False),
        "no email": issuer.token(email=None),
        "a key the issuer never published": issuer.token(signer=issuer.rogue),
        "not a token": "not.a.token",
    }
    for name, token in bad_tokens.items():
        for method, path, body in ROUTES:
            headers = {"Authorization": f"Bearer {token}"}
            response = call(guarded, method, path, body, headers=headers)
            assert response.status_code == 403, (name, path, response.text)
            assert response.json()["code"] == "forbidden"
    assert not exists(runtime, "x-1")


def test_a_valid_token_is_the_principal_recorded_in_the_log(
    guarded: procs.Server, issuer: Issuer, runtime: Runtime
) -> None:
    started = call(
        guarded,
        "POST",
        "/executions",
        {"flow": "gated", "input": {"n": 1}, "execution_id": "ok-1"},
        headers=issuer.bearer(),
    )
    assert started.status_code == 200, started.text
    first = history(runtime, "ok-1")[0]
    assert isinstance(first, ExecutionStarted) and first.by == OPS
    read = call(guarded, "GET", "/executions/ok-1", headers=issuer.bearer())
    assert read.status_code == 200
    gate = started.json()["waiting_on"][0]
    raw = json.dumps({"on": gate["on"], "correlation_key": gate["correlation_key"]}).encode()
    headers = {**issuer.bearer(), "Content-Type": "application/json"}
    # The caller check is one wall; the resume secret is still the other.
    before = history(runtime, "ok-1")
    no_secret = httpx.post(
        f"http://{guarded.host}/executions/ok-1/resume", content=raw, headers=headers
    )
    assert no_secret.status_code == 403
    assert history(runtime, "ok-1") == before
    headers["X-Loom-Signature"] = sign(SECRET, "resume", "ok-1", raw)
    ok = httpx.post(f"http://{guarded.host}/executions/ok-1/resume", content=raw, headers=headers)
    assert ok.status_code == 200, ok.text
    resumed = [e for e in history(runtime, "ok-1") if isinstance(e, ExecutionResumed)]
    assert [e.by for e in resumed] == [OPS]


def test_loom_serve_refuses_a_reachable_address_without_an_authenticator(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOOM_CALLER_AUTH"}
    env["PYTHONPATH"] = str(REPO)
    store = f"sqlite:///{tmp_path / 'serve.db'}"
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        argv = [sys.executable, "-m", "loom", "--app", APP_REF, "--store", store, "serve"]
        done = subprocess.run(
            [*argv, "--host", host, "--port", str(procs.free_port())],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0, host
        assert "without an authenticator" in done.stderr, done.stderr
    assert not (tmp_path / "serve.db").exists()
