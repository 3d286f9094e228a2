"""Signed requests over the HTTP worker: a malformed signature, one made for another
execution or action, and a replayed one.

The worker is the ``worker`` target as functions-framework builds it, over a per-test
SQLite file; signatures are made with the worker's shared secret (``SharedSecretAuth``), the
out-of-the-box check. Every refusal is a 403 with the JSON error body, and the log of every
execution involved is unchanged.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from loom.events import ExecutionCancelled, MessageReceived
from loom.runtime import Runtime
from loom.workers.auth import Action, sign
from tests.functions.conftest import SECRET
from tests.functions.helpers import history
from tests.security.audit.helpers import JSON, refused

# (path template, action the signature must name, body)
SIGNED_ROUTES: list[tuple[str, Action, dict[str, Any]]] = [
    ("/executions/{}/resume", "resume", {"on": "go", "correlation_key": "{}:go"}),
    ("/executions/{}/verdict", "verdict", {"step_id": "1", "episode": 3, "verdict": "failed"}),
    ("/executions/{}/cancel", "cancel", {"reason": "stop"}),
    ("/executions/{}/retry", "retry", {}),
    ("/executions/{}/fork", "fork", {"from_step": "1", "execution_id": "forked-{}"}),
    ("/executions/{}/messages", "resume", {"topic": "t", "payload": 1}),
]


def suspended(client: FlaskClient, eid: str) -> None:
    started = client.post(
        "/executions", json={"flow": "gated", "input": {"n": 1}, "execution_id": eid}
    )
    assert started.status_code == 200 and started.json is not None, started.data
    assert started.json["status"] == "suspended"


def raw(body: dict[str, Any], eid: str) -> bytes:
    return json.dumps(body).replace("{}", eid).encode()


def post(client: FlaskClient, path: str, data: bytes, signature: str) -> Any:
    return client.post(path, data=data, headers={**JSON, "X-Loom-Signature": signature})


EXPIRIES = {
    "superscript": "²",
    "arabic-indic": "١٢٣",
    "5000-digits": "9" * 5000,
    "21-digits": "9" * 21,
    "negative": "-1",
    "exponent": "1e9",
    "float": "1.5",
    "empty": "",
    "spaced": " 1",
    "hex": "0x10",
}


@pytest.mark.parametrize("expires", list(EXPIRIES.values()), ids=list(EXPIRIES))
def test_a_malformed_expiry_is_refused_on_every_signed_route(
    client: FlaskClient, runtime: Runtime, expires: str
) -> None:
    """Attack: an ``X-Loom-Signature`` whose ``t=`` is no plain epoch (a superscript digit,
    5,000 digits, a float...). Promise: 403 naming the header's form on every route that
    takes a signature, never a 500 (``"²".isdigit()`` is true and ``int("²")`` raises), and
    nothing appended, nothing started."""
    suspended(client, "s-1")
    before = history(runtime, "s-1")
    signature = f"t={expires},sha256={'0' * 64}"
    for template, _, body in SIGNED_ROUTES:
        response = post(client, template.format("s-1"), raw(body, "s-1"), signature)
        refused(response, 403, "forbidden")
    start = {"flow": "echo", "input": {"n": 1}, "execution_id": "new-1"}
    refused(post(client, "/executions", raw(start, ""), signature), 403, "forbidden")
    refused(post(client, "/dead-letters/retry", b'{"status": "failed"}', signature), 403)
    assert history(runtime, "s-1") == before
    assert client.get("/executions/new-1").status_code == 404


def test_a_signature_for_one_execution_or_action_acts_on_no_other(
    client: FlaskClient, runtime: Runtime
) -> None:
    """Attack: a caller holding a valid signature for execution A (or for another action on
    it) sends it to execution B, or to another route of A (IDOR through the signature).
    Promise: 403 and neither log changes; the signature works where it was made for."""
    suspended(client, "mine")
    suspended(client, "theirs")
    logs = {eid: history(runtime, eid) for eid in ("mine", "theirs")}
    for template, action, body in SIGNED_ROUTES:
        mine = raw(body, "mine")
        signature = sign(SECRET, action, "mine", mine)
        refused(post(client, template.format("theirs"), mine, signature), 403, "forbidden")
        theirs = raw(body, "theirs")  # the body rewritten for B, the signature still A's
        refused(post(client, template.format("theirs"), theirs, signature), 403, "forbidden")
        for other, other_action, _ in SIGNED_ROUTES:
            if other_action != action:  # a signature names its route's action
                refused(post(client, other.format("mine"), mine, signature), 403, "forbidden")
    assert {eid: history(runtime, eid) for eid in logs} == logs
    cancel = raw({"reason": "stop"}, "mine")
    ok = post(client, "/executions/mine/cancel", cancel, sign(SECRET, "cancel", "mine", cancel))
    assert ok.status_code == 200 and ok.json is not None and ok.json["status"] == "cancelled"
    assert history(runtime, "theirs") == logs["theirs"]


def test_a_replayed_signed_cancel_or_message_with_an_id_lands_once(
    client: FlaskClient, runtime: Runtime
) -> None:
    """Attack: a captured signed request sent again while its signature is still good.
    Promise: a cancel is recorded once (the replay answers 409 ``finished``); a message sent
    with a ``message_id`` is delivered once."""
    client.post("/executions", json={"flow": "mailbox", "input": 3, "execution_id": "box"})
    message = json.dumps({"topic": "cmd", "payload": "a", "message_id": "m-1"}).encode()
    signature = sign(SECRET, "resume", "box", message)
    for _ in range(3):
        assert post(client, "/executions/box/messages", message, signature).status_code == 200
    received = [e for e in history(runtime, "box") if isinstance(e, MessageReceived)]
    assert [(e.message_id, e.payload) for e in received] == [("m-1", "a")]

    cancel = json.dumps({"reason": "stop"}).encode()
    signature = sign(SECRET, "cancel", "box", cancel)
    assert post(client, "/executions/box/cancel", cancel, signature).status_code == 200
    after = history(runtime, "box")
    refused(post(client, "/executions/box/cancel", cancel, signature), 409, "finished")
    assert history(runtime, "box") == after
    assert sum(isinstance(e, ExecutionCancelled) for e in after) == 1


def test_a_replayed_signed_request_without_an_id_creates_nothing_twice(
    client: FlaskClient, runtime: Runtime
) -> None:
    """Attack: a captured signed message, start or fork that names no id of its own (the
    default used to be a fresh one per request), sent again while the signature is good.
    Promise: the copy names the same message or execution (the default is derived from the
    signature), so one message is delivered, one execution started, one fork made."""
    client.post("/executions", json={"flow": "mailbox", "input": 3, "execution_id": "box"})
    message = json.dumps({"topic": "cmd", "payload": "a"}).encode()
    signature = sign(SECRET, "resume", "box", message)
    for _ in range(3):
        reply = post(client, "/executions/box/messages", message, signature)
        assert reply.status_code == 200 and reply.json["status"] == "suspended", reply.data
    # The same signature rewritten in forms the check accepts just as well is the same copy.
    expires, digest = signature.removeprefix("t=").split(",sha256=")
    for variant in (
        f" t={expires} , sha256={digest} ",
        f"sha256={digest},t={expires}",
        f"t=000{expires},sha256={digest}",
    ):
        reply = post(client, "/executions/box/messages", message, variant)
        assert reply.status_code == 200 and reply.json["status"] == "suspended", reply.data
    received = [e for e in history(runtime, "box") if isinstance(e, MessageReceived)]
    assert [e.payload for e in received] == ["a"]

    start = json.dumps({"flow": "gated", "input": {"n": 1}}).encode()
    signature = sign(SECRET, "start", "", start)
    ids = {post(client, "/executions", start, signature).json["execution_id"] for _ in range(3)}
    assert len(ids) == 1
    assert len(asyncio.run(runtime.list(limit=100))) == 2  # the box and one start

    suspended(client, "orig")
    fork = json.dumps({"from_step": "1"}).encode()
    signature = sign(SECRET, "fork", "orig", fork)
    forks = {post(client, "/executions/orig/fork", fork, signature).json["execution_id"]}
    forks.add(post(client, "/executions/orig/fork", fork, signature).json["execution_id"])
    assert len(forks) == 1 and "orig" not in forks
    assert len(asyncio.run(runtime.list(limit=100))) == 4  # + the original and one fork
