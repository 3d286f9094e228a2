"""Schedules at run time over HTTP, through the worker target as functions-framework serves
it: created, listed, read, updated, paused, unpaused, triggered, backfilled and deleted;
every change authorized like a re-drive (action ``schedule``); bad input refused with
nothing written; every answer fits the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from flask.testing import FlaskClient

from loom.runtime import Runtime
from loom.workers.auth import sign
from tests.functions.conftest import BEARER, SECRET
from tests.functions.helpers import assert_error
from tests.functions.test_openapi import _check  # pyright: ignore[reportPrivateUsage]

JSON = {"Content-Type": "application/json"}
OPS = {**JSON, **BEARER}


def _post(client: FlaskClient, path: str, body: dict[str, Any], headers: dict[str, str] = OPS):
    return client.post(path, data=json.dumps(body), headers=headers)


def test_a_schedule_made_over_http_is_listed_changed_and_removed(
    client: FlaskClient, runtime: Runtime
):
    body = {"name": "nightly", "cron": "0 2 * * *", "flow": "echo", "input": {"n": 1}}
    made = _post(client, "/schedules", body)
    _check("/schedules", "post", made)
    assert made.status_code == 200 and made.json is not None
    assert (made.json["schedule"]["declared"], made.json["schedule"]["paused"]) == (False, False)
    listed = client.get("/schedules")
    _check("/schedules", "get", listed)
    assert listed.json is not None
    assert "nightly" in [s["name"] for s in listed.json["schedules"]]
    one = client.get("/schedules/nightly")
    _check("/schedules/{name}", "get", one)
    assert one.json is not None and one.json["schedule"]["input"] == {"n": 1}
    changed = client.patch(
        "/schedules/nightly", data=json.dumps({"cron": "0 3 * * *"}), headers=OPS
    )
    _check("/schedules/{name}", "patch", changed)
    assert changed.json is not None and changed.json["schedule"]["cron"] == "0 3 * * *"
    paused = _post(client, "/schedules/nightly/pause", {"note": "freeze"})
    _check("/schedules/{name}/pause", "post", paused)
    assert paused.json is not None and paused.json["schedule"]["paused"] is True
    assert paused.json["schedule"]["next_fire"] is None
    unpaused = client.post("/schedules/nightly/unpause", headers=BEARER)  # no body: no note
    _check("/schedules/{name}/unpause", "post", unpaused)
    assert unpaused.json is not None and unpaused.json["schedule"]["paused"] is False
    fired = client.post("/schedules/nightly/trigger", headers=BEARER)
    _check("/schedules/{name}/trigger", "post", fired)
    assert fired.json is not None and fired.json["fired"]["started"] is True
    eid = fired.json["fired"]["execution_id"]
    assert asyncio.run(runtime.result(eid)).status == "completed"
    start = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    back = _post(client, "/schedules/nightly/backfill", {"start": start, "end": 1767398400})
    _check("/schedules/{name}/backfill", "post", back)
    assert back.json is not None
    assert [f["tick"] for f in back.json["fired"]] == [
        "2026-01-01T03:00:00Z",
        "2026-01-02T03:00:00Z",
    ]
    gone = client.delete("/schedules/nightly", headers=BEARER)
    _check("/schedules/{name}", "delete", gone)
    assert gone.status_code == 200
    missing = client.get("/schedules/nightly")
    _check("/schedules/{name}", "get", missing)
    assert_error(missing, 404)
    assert asyncio.run(runtime.result(eid)).status == "completed"  # its executions stay


def test_changes_are_authorized_like_a_redrive(client: FlaskClient, runtime: Runtime):
    body = json.dumps({"name": "s", "cron": "* * * * *", "flow": "echo"}).encode()
    assert_error(client.post("/schedules", data=body, headers=JSON), 401)
    forged = {**JSON, "X-Loom-Signature": sign(SECRET, "retry", "", body)}
    assert_error(client.post("/schedules", data=body, headers=forged), 403)
    signed = {**JSON, "X-Loom-Signature": sign(SECRET, "schedule", "", body)}
    assert client.post("/schedules", data=body, headers=signed).status_code == 200
    for method, path in [
        ("patch", "/schedules/s"),
        ("delete", "/schedules/s"),
        ("post", "/schedules/s/pause"),
        ("post", "/schedules/s/unpause"),
        ("post", "/schedules/s/trigger"),
        ("post", "/schedules/s/backfill"),
    ]:
        answer = getattr(client, method)(path, data=b"{}", headers=JSON)
        assert answer.status_code == 401, (method, path)
    assert [s.name for s in asyncio.run(runtime.store.schedules().list())] == ["s"]
    assert not asyncio.run(runtime.list())  # nothing triggered


def test_bad_input_is_refused_naming_what_was_wrong(client: FlaskClient, runtime: Runtime):
    cases = [
        ({"name": "x", "cron": "* * *", "flow": "echo"}, 400, "cron expression"),
        ({"name": "x", "cron": "* * * * *", "flow": "nope"}, 404, "nope"),
        ({"name": "x", "cron": "* * * * *", "flow": "echo", "timezone": "Nowhere/X"}, 400, "zone"),
        ({"name": "x", "cron": "* * * * *", "flow": "echo", "every": 1}, 400, "every"),
        ({"name": "", "cron": "* * * * *", "flow": "echo"}, 400, "name"),
    ]
    for body, status, what in cases:
        answer = _post(client, "/schedules", body)
        _check("/schedules", "post", answer)
        assert answer.status_code == status and what in json.dumps(answer.json), body
    assert not asyncio.run(runtime.store.schedules().list())
    assert (
        _post(client, "/schedules", {"name": "x", "cron": "@daily", "flow": "echo"}).status_code
        == 200
    )
    taken = _post(client, "/schedules", {"name": "x", "cron": "@hourly", "flow": "echo"})
    assert taken.status_code == 400 and "exists" in json.dumps(taken.json)
    empty = client.patch("/schedules/x", data="{}", headers=OPS)
    assert empty.status_code == 400
    backwards = _post(client, "/schedules/x/backfill", {"start": 1767398400, "end": 1767225600})
    _check("/schedules/{name}/backfill", "post", backwards)
    assert backwards.status_code == 400
    unknown = client.post("/schedules/zz/trigger", headers=BEARER)
    _check("/schedules/{name}/trigger", "post", unknown)
    assert_error(unknown, 404)
