"""Capabilities are granted by policy, never by the request: over HTTP, Pub/Sub, the CLI and
Commission, a start asking for more than its principal may grant is refused and writes
nothing.

The HTTP worker and the Pub/Sub events target run as real functions-framework processes on
loopback; the grant policy comes from ``LOOM_GRANTS`` as a deployment would set it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom.commission import ExecutorError, StepInput
from loom.commission.executors import FlowExecutor
from loom.errors import ConfigurationError, NotPermittedError, UnknownExecutionError
from loom.events import ExecutionResumed, ExecutionStarted
from loom.grants import GrantPolicy, rules
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.workers.auth import sign
from tests import procs
from tests.functions.apps import app as test_app
from tests.functions.conftest import APP_REF, BEARER, MAIN, REPO, SECRET, WorkerFactory
from tests.functions.helpers import history

pytestmark = pytest.mark.slow

GRANTS = json.dumps(
    {
        "grants": [
            {"principal": "shared-secret", "flow": "echo", "capabilities": ["email"]},
            {"principal": "local:*", "flow": "echo", "capabilities": ["email"]},
        ]
    }
)


def exists(runtime: Runtime, eid: str) -> bool:
    import asyncio

    try:
        asyncio.run(runtime.require(eid))
    except UnknownExecutionError:
        return False
    return True


def start(
    server: Any, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.post(f"http://{server.host}/executions", json=body, headers=headers, timeout=30)


def test_a_start_cannot_grant_itself_capabilities_over_http(
    workers: WorkerFactory, runtime: Runtime
) -> None:
    server = workers(LOOM_GRANTS=GRANTS)
    asks = {"flow": "echo", "input": {"n": 1}, "capabilities": ["payments", "admin"]}
    for eid, headers in [("h-anon", None), ("h-secret", BEARER)]:
        response = start(server, {**asks, "execution_id": eid}, headers)
        assert response.status_code == 403, response.text
        body = response.json()
        assert body["code"] == "not_permitted"
        assert body["details"]["denied"] == ["admin", "payments"]
        assert not exists(runtime, eid)
    # One granted capability too many is still too many; nothing is partly granted.
    mixed = {**asks, "capabilities": ["email", "payments"], "execution_id": "h-mixed"}
    assert start(server, mixed, BEARER).status_code == 403
    assert not exists(runtime, "h-mixed")
    # Anonymous may grant nothing, not even what the shared secret may.
    anon = {**asks, "capabilities": ["email"], "execution_id": "h-anon-email"}
    assert start(server, anon).status_code == 403
    # What the policy grants is granted, and who granted it is recorded.
    ok = start(server, {**anon, "execution_id": "h-ok"}, BEARER)
    assert ok.status_code == 200, ok.text
    first = history(runtime, "h-ok")[0]
    assert isinstance(first, ExecutionStarted)
    assert (first.capabilities, first.by) == (["email"], "shared-secret")
    # A start asking for nothing needs no one's authority.
    plain = start(server, {"flow": "echo", "input": {"n": 1}, "execution_id": "h-plain"})
    assert plain.status_code == 200
    started = history(runtime, "h-plain")[0]
    assert isinstance(started, ExecutionStarted) and started.by == "anonymous"


def test_a_bad_credential_on_a_start_is_refused_not_taken_as_anonymous(
    workers: WorkerFactory, runtime: Runtime
) -> None:
    server = workers(LOOM_GRANTS=GRANTS)
    body = {"flow": "echo", "input": {"n": 1}, "execution_id": "b-1"}
    response = start(server, body, {"Authorization": "Bearer not-the-secret-at-all"})
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert not exists(runtime, "b-1")


# -- Pub/Sub -----------------------------------------------------------------------------


def push(message: dict[str, Any], message_id: str, signature: str | None = None) -> dict[str, Any]:
    raw = json.dumps(message).encode()
    attributes = {} if signature is None else {"loom-signature": signature}
    return {
        "message": {
            "data": base64.b64encode(raw).decode(),
            "attributes": attributes,
            "messageId": message_id,
        },
        "subscription": "projects/p/subscriptions/s",
    }


def signed_push(message: dict[str, Any], message_id: str, **kw: Any) -> dict[str, Any]:
    raw = json.dumps(message).encode()
    eid = str(message.get("execution_id") or "")
    return push(message, message_id, sign(SECRET, message["action"], eid, raw, **kw))


@pytest.fixture
def events_target(tmp_path: Path, worker_env: dict[str, str]) -> Iterator[procs.Server]:
    """``functions-framework --target events`` on loopback, on the test's store."""
    port = procs.free_port()
    argv = [sys.executable, "-m", "functions_framework", "--source", str(MAIN)]
    argv += ["--target", "events", "--signature-type", "cloudevent"]
    argv += ["--host", procs.LOOPBACK, "--port", str(port)]
    env = {**procs.OFFLINE_ENV, "PYTHONPATH": str(REPO), **worker_env, "LOOM_GRANTS": GRANTS}
    server = procs.start("events", argv, port=port, log_path=tmp_path / "events.log", env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            if server.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"events target did not listen:\n{server.log_tail()}")
            with socket.socket() as sock:
                if sock.connect_ex((procs.LOOPBACK, port)) == 0:
                    break
            time.sleep(0.05)
        yield server
    finally:
        procs.stop(server)


def deliver(server: procs.Server, data: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"http://{server.host}/", json=data, timeout=30)


def test_pubsub_needs_the_same_authority_as_http(
    events_target: procs.Server, runtime: Runtime, workers: WorkerFactory
) -> None:
    # Escalation through Pub/Sub: unsigned, or signed by a principal the policy limits.
    grab = {"action": "start", "flow": "echo", "input": {"n": 1}, "capabilities": ["admin"]}
    for eid, data in [
        ("p-anon", push({**grab, "execution_id": "p-anon"}, "m1")),
        ("p-secret", signed_push({**grab, "execution_id": "p-secret"}, "m2")),
        ("p-forged", push({**grab, "execution_id": "p-forged"}, "m3", "t=1,sha256=00")),
    ]:
        assert deliver(events_target, data).status_code == 200  # acknowledged: never retried
        assert not exists(runtime, eid), eid
    # A resume with no signature, a signature for a start, or an expired one: not applied.
    server = workers()
    gated = start(server, {"flow": "gated", "input": {"n": 1}, "execution_id": "p-g"})
    gate = gated.json()["waiting_on"][0]
    resume = {"action": "resume", "execution_id": "p-g", "on": gate["on"]}
    resume["correlation_key"] = gate["correlation_key"]
    before = history(runtime, "p-g")
    raw = json.dumps(resume).encode()
    for data in [
        push(resume, "r1"),
        push(resume, "r2", sign(SECRET, "start", "p-g", raw)),
        push(resume, "r3", sign(SECRET, "resume", "other", raw)),
        signed_push(resume, "r4", expires=int(time.time()) - 1),
    ]:
        assert deliver(events_target, data).status_code == 200
    assert history(runtime, "p-g") == before
    # Properly signed, it is applied, and recorded as by the shared secret's holder.
    assert deliver(events_target, signed_push(resume, "r5")).status_code == 200
    resumed = [e for e in history(runtime, "p-g") if isinstance(e, ExecutionResumed)]
    assert [e.by for e in resumed] == ["shared-secret"]
    granted = signed_push({**grab, "capabilities": ["email"], "execution_id": "p-ok"}, "m4")
    assert deliver(events_target, granted).status_code == 200
    first = history(runtime, "p-ok")[0]
    assert isinstance(first, ExecutionStarted) and first.capabilities == ["email"]


# -- the CLI and Commission --------------------------------------------------------------


def test_the_cli_grants_only_what_policy_lets_the_local_user_grant(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOOM_GRANTS": GRANTS, "LOOM_TEST_DIR": ""}

    def loom(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "loom", "--app", APP_REF, "--store", store, *args]
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=60, check=False
        )

    denied = loom("start", "echo", "--id", "c-1", "--capability", "admin", "--input", '{"n": 1}')
    assert denied.returncode == 2, denied.stderr
    assert "may not grant admin" in denied.stderr
    assert "unknown execution" in loom("show", "c-1").stderr
    ok = loom("start", "echo", "--id", "c-2", "--capability", "email", "--input", '{"n": 1}')
    assert ok.returncode == 0, ok.stderr
    shown = json.loads(loom("show", "c-2", "--json").stdout)
    started = shown["events"][0]
    assert started["by"].startswith("local:") and started["capabilities"] == ["email"]


def step_input() -> StepInput:
    return StepInput(
        case_id="c",
        revision=0,
        step=1,
        frontier=(),
        subject={},
        commission_id="k",
        mandate="",
        assignee="bot",
    )


async def test_commission_cannot_escalate_a_flows_capabilities() -> None:
    policy = GrantPolicy(rules({"commission:bot": {"echo": ["email"]}}))
    runtime = Runtime(test_app, InMemoryEventStore(), grants=policy)
    greedy = FlowExecutor(
        runtime, "echo", capabilities=frozenset({"payments"}), principal="commission:bot"
    )
    with pytest.raises(ExecutorError, match="may not grant payments") as caught:
        await greedy.step(step_input())
    assert isinstance(caught.value.__cause__, NotPermittedError)
    assert await runtime.list() == []
    other = FlowExecutor(
        runtime, "echo", capabilities=frozenset({"email"}), principal="commission:eve"
    )
    with pytest.raises(ExecutorError):
        await other.step(step_input())
    assert await runtime.list() == []


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("not json", "not valid JSON"),
        ("[]", "expected"),
        ('{"grants": [], "extra": 1}', "expected"),
        ('{"grants": {}}', "a list of rules"),
        ('{"grants": [1]}', "grants.0: a rule is a JSON object"),
        ('{"grants": [{"principal": "p", "scope": "x"}]}', "unknown field 'scope'"),
        ('{"grants": [{"principal": ""}]}', "grants.0.principal"),
        ('{"grants": [{"principal": "p", "flow": 3}]}', "grants.0.flow"),
        ('{"grants": [{"principal": "p", "capabilities": "payments"}]}', "capabilities"),
    ],
)
def test_a_malformed_grant_policy_is_a_configuration_error_naming_the_field(
    text: str, complaint: str
) -> None:
    with pytest.raises(ConfigurationError, match="grant policy") as caught:
        GrantPolicy.from_json(text)
    assert complaint in caught.value.message


def test_a_grant_policy_document_round_trips_its_rules() -> None:
    policy = GrantPolicy.from_json(
        '{"grants": [{"principal": "ops@x", "flow": "order.*", "capabilities": ["payments"]},'
        ' {"principal": "local:*"}]}'
    )
    assert policy.grantable("ops@x", "order.fulfil") == {"payments"}
    assert policy.grantable("local:ann", "order.fulfil") == frozenset()
    assert policy.grantable("anonymous", "order.fulfil") == frozenset()
