"""The deployed services' caller check, as Terraform configures it, end to end.

The worker target runs as a real functions-framework process with the settings the Terraform
module gives it (``LOOM_CALLER_AUTH=loom_gcp.auth:google_id_token``, its own URL and gcloud's
client id as audiences, the invokers' and operators' emails as principals, Cloud Run's IAM
trusted, an empty grant policy, ``K_SERVICE`` set). Two pieces stand in for what exists only
in Google's cloud (fakes, since no emulator of them exists):

* the *Cloud Run front end*: checks the ID token of each request as Cloud Run IAM does (in
  ``X-Serverless-Authorization`` when present, else ``Authorization``; an invoker's email;
  the service URL or gcloud's client id as audience), then forwards it with the service's
  ``Host`` and, for ``X-Serverless-Authorization``, the signature replaced by
  ``SIGNATURE_REMOVED_BY_GOOGLE`` (what Cloud Run documents);
* ``gcloud run services proxy``: a local proxy that adds the operator's gcloud ID token
  (audience: gcloud's client id) in ``X-Serverless-Authorization``, as the binary gcloud
  runs for it (cloud-run-proxy) does.

The documented paths (docs/operations/console.md, deploy.md) then work as written: the operator opens the console at the proxy's
``/console`` and acts through it; a member of ``worker_invokers`` calls the API with
``Authorization: Bearer $(gcloud auth print-identity-token)``. Everyone else is refused, and
the tasks target admits only the invoker account's token.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.auth import jwt

from loom import events as ev
from loom.runtime import Runtime
from tests import procs
from tests.functions.conftest import MAIN, REPO, SECRET, WorkerFactory
from tests.functions.helpers import seed
from tests.security.id_tokens import Issuer

pytestmark = pytest.mark.slow

GCLOUD_CLIENT_ID = "32555940559.apps.googleusercontent.com"  # gcloud's own OAuth client
REMOVED_SIGNATURE = "SIGNATURE_REMOVED_BY_GOOGLE"  # what Cloud Run puts in its place
WORKER_HOST = "loom-worker-123456789.europe-west1.run.app"
WORKER_URL = f"https://{WORKER_HOST}"
TASKS_URL = "https://loom-tasks-123456789.europe-west1.run.app"
OPERATOR = "op@example.com"  # console_operators
CI = "ci@project.iam.gserviceaccount.com"  # worker_invokers = ["serviceAccount:..."]
INVOKER = "loom-invoker@project.iam.gserviceaccount.com"
IAM_INVOKERS = {OPERATOR, CI, "stranger@example.com"}  # IAM admits a stranger the check does not


def terraform_env(issuer: Issuer, target: str) -> dict[str, str]:
    """What terraform/modules/loom/run.tf sets for the caller check of ``target``."""
    audiences = [WORKER_URL, GCLOUD_CLIENT_ID] if target == "worker" else [TASKS_URL]
    principals = [CI, OPERATOR] if target == "worker" else [INVOKER]
    return {
        "LOOM_CALLER_AUTH": "loom_gcp.auth:google_id_token",
        "LOOM_AUTH_AUDIENCE": ",".join(audiences),
        "LOOM_AUTH_PRINCIPALS": ",".join(principals),
        "LOOM_AUTH_TRUST_CLOUD_RUN": "true",
        "LOOM_GRANTS": json.dumps({"grants": []}),
        "LOOM_AUTH_CERTS_URL": issuer.certs_url,
        "K_SERVICE": f"loom-{target}",
    }


Handler = Callable[[http.server.BaseHTTPRequestHandler], None]
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def forwarding(
    upstream: str, rewrite: Callable[[dict[str, str]], dict[str, str] | None]
) -> type[http.server.BaseHTTPRequestHandler]:
    """A handler that forwards every request to ``upstream`` with headers ``rewrite`` made
    (``None``: answer 403 as Cloud Run IAM would)."""

    class Forward(http.server.BaseHTTPRequestHandler):
        def _go(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size) if size else b""
            headers = rewrite({k: v for k, v in self.headers.items() if k.lower() not in _HOP})
            if headers is None:
                self.send_response(403)
                self.end_headers()
                return
            answer = httpx.request(
                self.command, f"{upstream}{self.path}", headers=headers, content=body, timeout=30
            )
            self.send_response(answer.status_code)
            for key, value in answer.headers.multi_items():
                if key.lower() not in _HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _go

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Forward


def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer((procs.LOOPBACK, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def cloud_run_front(issuer: Issuer, upstream: str, audiences: list[str]) -> Any:
    """The fake Cloud Run front end (see the module docstring)."""

    def iam(headers: dict[str, str]) -> dict[str, str] | None:
        name = "X-Serverless-Authorization"
        used = name if name in headers else "Authorization"
        token = headers.get(used, "").removeprefix("Bearer ").strip()
        try:
            claims = jwt.decode(token, certs=issuer.certs(), audience=audiences)
        except ValueError:
            return None
        if claims.get("email") not in IAM_INVOKERS | {INVOKER}:
            return None
        if used == name:  # Cloud Run removes the signature of the token it checked there
            head, payload, _ = token.split(".")
            headers[name] = f"Bearer {head}.{payload}.{REMOVED_SIGNATURE}"
        return {**headers, "Host": WORKER_HOST, "X-Forwarded-Proto": "https"}

    return serve(forwarding(upstream, iam))


def gcloud_proxy(front: str, token: str) -> Any:
    """``gcloud run services proxy``: the operator's gcloud ID token on every request."""

    def add(headers: dict[str, str]) -> dict[str, str]:
        return {**headers, "X-Serverless-Authorization": f"Bearer {token}"}

    return serve(forwarding(front, add))


@pytest.fixture
def deployed(workers: WorkerFactory, issuer: Issuer) -> Iterator[tuple[procs.Server, str]]:
    worker = workers(**terraform_env(issuer, "worker"))
    front = cloud_run_front(issuer, f"http://{worker.host}", [WORKER_URL, GCLOUD_CLIENT_ID])
    try:
        yield worker, f"http://{procs.LOOPBACK}:{front.server_port}"
    finally:
        front.shutdown()
        front.server_close()


def cookies_of(answer: httpx.Response) -> dict[str, str]:
    """The cookies an answer sets (a browser on http://localhost keeps Secure ones too)."""
    jar: dict[str, str] = {}
    for line in answer.headers.get_list("set-cookie"):
        name, _, rest = line.partition("=")
        jar[name] = rest.split(";", 1)[0]
    return jar


def test_an_operator_opens_and_uses_the_console_through_gcloud_run_services_proxy(
    deployed: tuple[procs.Server, str], issuer: Issuer, runtime: Runtime
) -> None:
    _, front = deployed
    seed(runtime, "gated", {"n": 1}, "o-1")
    token = issuer.token(email=OPERATOR, aud=GCLOUD_CLIENT_ID)  # a person's gcloud token
    proxy = gcloud_proxy(front, token)
    base = f"http://localhost:{proxy.server_port}"
    try:
        page = httpx.get(f"{base}/console/executions", timeout=30)
        assert page.status_code == 200, page.text
        assert "o-1" in page.text and OPERATOR in page.text
        jar = cookies_of(page)
        csrf = jar["loom_console_csrf"]
        signed = httpx.post(
            f"{base}/console/sign-in",
            data={"csrf": csrf, "token": SECRET},
            cookies=jar,
            timeout=30,
        )
        assert signed.status_code == 303, signed.text
        jar |= cookies_of(signed)
        done = httpx.post(
            f"{base}/console/executions/o-1/cancel",
            data={"csrf": csrf, "reason": "operator says stop"},
            cookies=jar,
            timeout=30,
        )
        assert done.status_code == 303, done.text
    finally:
        proxy.shutdown()
        proxy.server_close()
    ends = [
        e
        for e in asyncio.run(runtime.history("o-1"))
        if e.type in ("CancelRequested", "ExecutionCancelled")
    ]
    assert ends and all(getattr(e, "by", None) == OPERATOR for e in ends), ends


def test_the_readme_curl_path_and_everyone_else(
    deployed: tuple[procs.Server, str], issuer: Issuer, runtime: Runtime
) -> None:
    worker, front = deployed
    start = {"flow": "echo", "input": {"n": 1}, "execution_id": "api-1"}
    as_ci = {"Authorization": f"Bearer {issuer.token(email=CI, aud=WORKER_URL)}"}
    ok = httpx.post(f"{front}/executions", json=start, headers=as_ci, timeout=30)
    assert ok.status_code == 200, ok.text
    first = asyncio.run(runtime.history("api-1"))[0]
    assert isinstance(first, ev.ExecutionStarted) and first.by == CI
    # A person's `gcloud auth print-identity-token` (gcloud's client id as audience).
    person = {"Authorization": f"Bearer {issuer.token(email=OPERATOR, aud=GCLOUD_CLIENT_ID)}"}
    assert httpx.get(f"{front}/executions/api-1", headers=person, timeout=30).status_code == 200
    # IAM lets a stranger through; the service's own check does not.
    stranger = {
        "Authorization": f"Bearer {issuer.token(email='stranger@example.com', aud=WORKER_URL)}"
    }
    refused = httpx.get(f"{front}/executions/api-1", headers=stranger, timeout=30)
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    # Straight to the container (what Cloud Run never lets happen): a token with its
    # signature removed that no front end checked is still only as good as its claims,
    # and a forged one for someone not allowed is refused.
    head, payload, _ = issuer.token(email="mallory@example.com").split(".")
    forged = {"X-Serverless-Authorization": f"Bearer {head}.{payload}.{REMOVED_SIGNATURE}"}
    direct = httpx.get(f"http://{worker.host}/executions/api-1", headers=forged, timeout=30)
    assert direct.status_code == 403


def test_without_cloud_runs_iam_a_stripped_token_is_refused(
    workers: WorkerFactory, issuer: Issuer
) -> None:
    env = {**terraform_env(issuer, "worker"), "LOOM_AUTH_TRUST_CLOUD_RUN": ""}
    worker = workers(**env)
    head, payload, _ = issuer.token(email=OPERATOR, aud=WORKER_URL).split(".")
    for header in ("Authorization", "X-Serverless-Authorization"):
        stripped = {header: f"Bearer {head}.{payload}.{REMOVED_SIGNATURE}"}
        answer = httpx.get(f"http://{worker.host}/executions/x", headers=stripped, timeout=30)
        assert answer.status_code in (401, 403), (header, answer.text)


def test_the_tasks_target_admits_only_the_invoker_account(
    issuer: Issuer, worker_env: dict[str, str], tmp_path: Path
) -> None:
    port = procs.free_port()
    argv = [sys.executable, "-m", "functions_framework", "--source", str(MAIN)]
    argv += ["--target", "tasks", "--host", procs.LOOPBACK, "--port", str(port)]
    env = {**procs.OFFLINE_ENV, "PYTHONPATH": str(REPO), **worker_env}
    env |= terraform_env(issuer, "tasks")
    server = procs.start("tasks", argv, port=port, log_path=tmp_path / "tasks.log", env=env)
    try:
        procs.wait_http_ready(server, "/live", timeout=30)
        url = f"http://{server.host}/tasks/execute"
        body = {"executionPackage": {"execution_id": "t-1"}}
        assert httpx.post(url, json=body, timeout=30).status_code == 401
        for who, aud in ((CI, TASKS_URL), (INVOKER, WORKER_URL)):
            bearer = {"Authorization": f"Bearer {issuer.token(email=who, aud=aud)}"}
            assert httpx.post(url, json=body, headers=bearer, timeout=30).status_code == 403
        invoker = {"Authorization": f"Bearer {issuer.token(email=INVOKER, aud=TASKS_URL)}"}
        answer = httpx.post(url, json=body, headers=invoker, timeout=30)
        assert answer.status_code == 200 and answer.json()["outcome"] == "unknown_execution"
        assert httpx.get(f"http://{server.host}/health", timeout=30).status_code == 200
    finally:
        procs.stop(server)


def test_console_pages_name_no_token(deployed: tuple[procs.Server, str], issuer: Issuer) -> None:
    """What the operator's browser sees never carries the token the proxy added."""
    _, front = deployed
    token = issuer.token(email=OPERATOR, aud=GCLOUD_CLIENT_ID)
    proxy = gcloud_proxy(front, token)
    try:
        page = httpx.get(f"http://localhost:{proxy.server_port}/console/executions", timeout=30)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert page.status_code == 200
    assert token.split(".")[1] not in page.text and not re.search(REMOVED_SIGNATURE, page.text)
