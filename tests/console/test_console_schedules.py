"""The console's schedules page: every schedule listed with its next fire time; pause,
unpause and trigger from a form, authorized like ``POST /schedules/{name}/...`` (action
``schedule``), CSRF-safe, and nothing changed by a refused request."""

from __future__ import annotations

import asyncio

from flask.testing import FlaskClient

from loom.runtime import Runtime
from tests.console.dom import select, text_of
from tests.console.test_console_actions import csrf, post, sign_in


def test_an_operator_pauses_unpauses_and_triggers_a_schedule(
    console: FlaskClient, shop: Runtime
) -> None:
    asyncio.run(shop.schedules.create("nightly", "0 2 * * *", flow="echo", input={"n": 1}))
    html = console.get("/console/schedules").get_data(as_text=True)
    row = text_of(html, "tr", data_name="nightly")
    assert "run time" in row and "0 2 * * *" in row and "echo" in row
    assert select(html, "a", id="nav-schedules")
    assert sign_in(console).status_code == 303
    token = csrf(console)
    paused = post(console, "/console/schedules/nightly/pause", {"csrf": token, "note": "freeze"})
    assert (paused.status_code, paused.headers["Location"]) == (303, "/console/schedules")
    record = asyncio.run(shop.store.schedules().get("nightly"))
    assert record is not None and record.paused and record.note == "freeze"
    assert record.by is not None and "shared-secret" in record.by
    page = console.get("/console/schedules").get_data(as_text=True)
    assert "schedule nightly paused" in text_of(page, "p", id="notice")
    assert post(console, "/console/schedules/nightly/unpause", {"csrf": token}).status_code == 303
    assert not asyncio.run(shop.schedules.get("nightly"))["paused"]
    fired = post(console, "/console/schedules/nightly/trigger", {"csrf": token})
    assert fired.status_code == 303
    runs = [r for r in asyncio.run(shop.list()) if r.execution_id.startswith("schedule:nightly#")]
    assert len(runs) == 1 and runs[0].status == "completed"


def test_refused_schedule_actions_change_nothing(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(shop.schedules.create("s", "* * * * *", flow="echo"))
    token = csrf(console)
    unsigned = post(console, "/console/schedules/s/pause", {"csrf": token})
    assert unsigned.status_code == 401  # no credential: the verdict check refuses
    assert sign_in(console).status_code == 303
    forged = post(console, "/console/schedules/s/pause", {"csrf": "x" * 43})
    assert forged.status_code == 403
    unknown = post(console, "/console/schedules/s/delete", {"csrf": token})
    assert unknown.status_code == 404
    missing = post(console, "/console/schedules/zz/trigger", {"csrf": token})
    assert missing.status_code == 404
    assert not asyncio.run(shop.schedules.get("s"))["paused"]
    assert not asyncio.run(shop.list())
