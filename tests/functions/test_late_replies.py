"""A reply that loses to its gate's timeout, on the routes that resume: the worker's
``POST /executions/{id}/resume`` (the ``worker`` target as functions-framework builds it,
over a SQLite file) and the Pub/Sub ``events`` target.

Before, a reply after a recorded timeout found the timeout's resume under its own key and
was answered like a redelivery of an accepted reply (200, the execution's state), and one
after the deadline whose timer had not run yet was appended and silently ignored. Its sender
now hears it lost: 409 ``gate_timed_out`` naming the gate and when it timed out, nothing
appended. An exact redelivery of an accepted reply stays a 200.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.workers.events_target import handle_event
from tests.functions.apps import app
from tests.functions.conftest import BEARER
from tests.functions.helpers import assert_error, history
from tests.functions.test_events_target import pubsub_data


def _start(client: FlaskClient, eid: str, seconds: float) -> None:
    body = {"flow": "deadline", "input": seconds, "execution_id": eid}
    answer = client.post("/executions", json=body)
    assert answer.status_code == 200 and answer.json is not None, answer.data
    assert answer.json["status"] == "suspended"


def _reply(client: FlaskClient, eid: str, payload: object = "yes") -> object:
    body = {"on": "answer", "correlation_key": eid, "payload": payload}
    return client.post(f"/executions/{eid}/resume", json=body, headers=BEARER)


def _refused(answer: object, eid: str) -> None:
    body = assert_error(answer, 409, "gate_timed_out")  # type: ignore[arg-type]
    assert "'answer'" in body["message"] and eid in body["message"]
    assert body["details"]["on"] == "answer" and body["details"]["correlation_key"] == eid
    assert isinstance(body["details"]["timed_out_at"], float)


def test_a_reply_after_the_timeout_is_refused_before_and_after_the_timer_runs(
    client: FlaskClient, runtime: Runtime
) -> None:
    _start(client, "late-1", 0.2)
    time.sleep(0.4)  # the deadline passes; no timer has run yet
    count = len(history(runtime, "late-1"))
    _refused(_reply(client, "late-1"), "late-1")
    assert len(history(runtime, "late-1")) == count  # nothing appended
    timer = client.post("/execute", json={"executionPackage": {"execution_id": "late-1"}})
    assert timer.status_code == 200 and timer.json is not None
    assert (timer.json["status"], timer.json["output"]) == ("completed", "timed out")
    count = len(history(runtime, "late-1"))
    for _ in range(2):  # the timeout is recorded now: refused, not taken for a redelivery
        _refused(_reply(client, "late-1"), "late-1")
    assert len(history(runtime, "late-1")) == count


def test_a_redelivered_accepted_reply_stays_a_success(client: FlaskClient, runtime: Runtime):
    _start(client, "ok-1", 0.5)
    first = _reply(client, "ok-1")
    assert first.status_code == 200 and first.json is not None  # type: ignore[attr-defined]
    assert first.json["output"] == "yes"  # type: ignore[attr-defined]
    count = len(history(runtime, "ok-1"))
    time.sleep(0.7)  # past the deadline the accepted reply beat
    again = _reply(client, "ok-1")
    assert again.status_code == 200 and again.json is not None  # type: ignore[attr-defined]
    assert (again.json["status"], again.json["output"]) == ("completed", "yes")  # type: ignore[attr-defined]
    assert len(history(runtime, "ok-1")) == count


def test_the_events_target_rejects_a_late_reply(tmp_path: Path) -> None:
    async def scenario() -> None:
        rt = Runtime(app, SqliteEventStore(tmp_path / "e.db"))
        try:
            await rt.start("deadline", 0.1, execution_id="ev-1")
            await asyncio.sleep(0.3)
            resume = {
                "action": "resume",
                "execution_id": "ev-1",
                "on": "answer",
                "correlation_key": "ev-1",
                "payload": "yes",
            }
            outcome = await handle_event(rt, "ce-1", pubsub_data(resume, "m-1"))
            assert outcome.outcome == "rejected" and outcome.error is not None
            assert outcome.error["code"] == "gate_timed_out"
        finally:
            await rt.store.aclose()

    asyncio.run(scenario())
