"""The smaller holes, each against a real worker process (and one in-process check of how
child flows inherit capabilities):

* a signature that differs from a valid one only in its last hex digit is refused: the whole
  digest is compared, not a prefix;
* message topics and ids take the id rule's alphabet (no control or format characters, no
  edge whitespace), and a signed message's default id form is the engine's;
* a planted ``loom_console_notice`` cookie is never shown as the page's notice;
* a child flow holds only what its parent's principal could grant to the child's own flow.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loom import events as ev
from loom.grants import GrantPolicy, rules
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.workers.auth import sign
from loom.workers.server import build_runtime
from tests.functions.apps import calls
from tests.functions.conftest import BEARER, SECRET, WorkerFactory
from tests.security.authority_app import app as authority_app

pytestmark = pytest.mark.slow

APP = "tests.security.authority_app:app"


@pytest.fixture
def rt(worker_env: dict[str, str]) -> Iterator[Runtime]:
    runtime = build_runtime(APP, worker_env["LOOM_STORE"])
    yield runtime
    asyncio.run(runtime.store.aclose())


def test_a_signature_wrong_in_its_last_hex_digit_is_refused(
    workers: WorkerFactory, rt: Runtime
) -> None:
    server = workers(LOOM_APP=APP)
    started = httpx.post(
        f"http://{server.host}/executions",
        json={"flow": "sec.deaf", "input": None, "execution_id": "sig-1"},
        timeout=30,
    )
    assert started.status_code == 200, started.text
    before = asyncio.run(rt.history("sig-1"))
    raw = json.dumps({"topic": "t", "payload": 1, "message_id": "m-1"}).encode()
    good = sign(SECRET, "resume", "sig-1", raw)
    last = good[-1]
    for bad in (good[:-1] + ("0" if last != "0" else "1"), good[:-2] + good[-1] + good[-2]):
        assert bad != good
        answer = httpx.post(
            f"http://{server.host}/executions/sig-1/messages",
            content=raw,
            headers={"Content-Type": "application/json", "X-Loom-Signature": bad},
            timeout=30,
        )
        assert answer.status_code == 403, answer.text
    assert asyncio.run(rt.history("sig-1")) == before
    ok = httpx.post(
        f"http://{server.host}/executions/sig-1/messages",
        content=raw,
        headers={"Content-Type": "application/json", "X-Loom-Signature": good},
        timeout=30,
    )
    assert ok.status_code == 200, ok.text  # the very same request, signed right, is taken


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("topic", "orders\nFAKE LOG LINE", "invalid_topic"),
        ("topic", "bidi\u202eevil", "invalid_topic"),
        ("topic", " padded", "invalid_topic"),
        ("message_id", "m\x00", "invalid_message_id"),
        ("message_id", "zero\u200bwidth", "invalid_message_id"),
        ("message_id", "sig:" + "a" * 32, "reserved_message_id"),
    ],
)
def test_message_names_keep_to_the_id_rules_alphabet(
    workers: WorkerFactory, rt: Runtime, field: str, value: str, code: str
) -> None:
    server = workers(LOOM_APP=APP)
    body = {"flow": "sec.deaf", "input": None, "execution_id": "names"}
    assert httpx.post(f"http://{server.host}/executions", json=body, timeout=30).status_code == 200
    before = asyncio.run(rt.history("names"))
    message = {"topic": "t", "payload": 1, "message_id": "m-2", field: value}
    answer = httpx.post(
        f"http://{server.host}/executions/names/messages",
        json=message,
        headers=BEARER,
        timeout=30,
    )
    assert answer.status_code == 400 and answer.json()["code"] == code, answer.text
    assert asyncio.run(rt.history("names")) == before


def test_a_planted_notice_cookie_is_not_shown(workers: WorkerFactory, rt: Runtime) -> None:
    server = workers(LOOM_APP=APP)
    body = {"flow": "sec.deaf", "input": None, "execution_id": "page-1"}
    assert httpx.post(f"http://{server.host}/executions", json=body, timeout=30).status_code == 200
    planted = "Urgent: call 555-0100 and read out your resume secret"
    for value in (planted, f"{'0' * 64}.{planted}"):
        page = httpx.get(
            f"http://{server.host}/console/executions/page-1",
            cookies={"loom_console_notice": value},
            timeout=30,
        )
        assert page.status_code == 200, page.text
        assert "555-0100" not in page.text


def test_a_child_holds_only_what_its_principal_could_grant_its_flow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sec.parent`` may be granted ``payments``, ``sec.order`` (its child, which charges)
    may not: the child loses it and its charge is refused without being invoked. Started by
    the process's own code (no principal), the child keeps what its parent holds."""
    policy = GrantPolicy(rules({"ops": {"sec.parent": ["payments"]}}))

    async def run(by: str | None, eid: str) -> tuple[ev.ExecutionStarted, str]:
        store = InMemoryEventStore()
        runtime = Runtime(authority_app, store, grants=policy)
        done = await runtime.start(
            "sec.parent", 3, execution_id=eid, capabilities={"payments"}, by=by
        )
        child = (await runtime.history(f"{eid}.child.1"))[0]
        assert isinstance(child, ev.ExecutionStarted)
        return child, done.status

    monkeypatch.setenv("LOOM_TEST_DIR", str(tmp_path))
    child, status = asyncio.run(run("ops", "p-1"))
    assert (child.capabilities, child.by, status) == ([], "ops", "failed")
    assert "p-1.child.1:2 sec.charge" not in calls(tmp_path)  # refused, not invoked
    trusted, status = asyncio.run(run(None, "p-2"))
    assert (trusted.capabilities, status) == (["payments"], "completed")
    assert "p-2.child.1:2 sec.charge" in calls(tmp_path)
