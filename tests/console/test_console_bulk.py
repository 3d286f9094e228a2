"""The console's bulk actions: a preview (a dry run, nothing written) of what the list's
filters select, then a confirmation that acts on exactly the executions shown."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from flask.testing import FlaskClient

from loom import events as ev
from loom.runtime import Runtime
from tests.console.dom import select, text_of
from tests.console.test_console_actions import csrf, post, sign_in


def _checkouts(shop: Runtime, *ids: str) -> None:
    for eid in ids:
        done = asyncio.run(shop.start("checkout", {"amount": 5}, execution_id=eid))
        assert done.status == "suspended"  # waiting for approval


def _confirm(console: FlaskClient, operation: str, pairs: list[tuple[str, str]]) -> Any:
    """Post a confirmation: repeated ``execution_id`` fields, as the preview's form sends."""
    return console.post(
        f"/console/bulk/{operation}",
        data=urlencode(pairs),
        content_type="application/x-www-form-urlencoded",
    )


def _ids(html: str) -> list[str]:
    return [i.attrs["value"] for i in select(html, "input", name="execution_id")]


def test_a_preview_writes_nothing_and_the_confirmation_acts_on_what_it_showed(
    console: FlaskClient, shop: Runtime
) -> None:
    _checkouts(shop, "c-1", "c-2")
    asyncio.run(shop.start("echo", 1, execution_id="e-1"))
    listed = console.get("/console/executions?flow=checkout").get_data(as_text=True)
    assert select(listed, "form", action="/console/bulk/preview")
    token = csrf(console)
    form = {
        "csrf": token,
        "operation": "cancel",
        "flow": "checkout",
        "status": "",
        "reason": "sold out",
    }
    shown = post(console, "/console/bulk/preview", form)
    assert shown.status_code == 200, shown.get_data(as_text=True)
    html = shown.get_data(as_text=True)
    assert text_of(html, "span", id="bulk-count") == "2"
    assert _ids(html) == ["c-2", "c-1"]
    assert {asyncio.run(shop.result(e)).status for e in ("c-1", "c-2")} == {"suspended"}
    _checkouts(shop, "c-3")  # started after the preview: not swept in by the confirmation
    assert sign_in(console).status_code == 303
    confirm = {"csrf": csrf(console), "reason": "sold out", "by": "ana"}
    done = _confirm(
        console, "cancel", [*confirm.items(), ("execution_id", "c-2"), ("execution_id", "c-1")]
    )
    assert done.status_code == 303 and done.headers["Location"] == "/console/executions"
    after = console.get(done.headers["Location"]).get_data(as_text=True)
    assert "cancel: 2 execution(s) done" in text_of(after, "p", id="notice")
    assert [asyncio.run(shop.result(e)).status for e in ("c-1", "c-2", "c-3")] == [
        "cancelled",
        "cancelled",
        "suspended",
    ]
    (asked,) = [e for e in asyncio.run(shop.history("c-1")) if isinstance(e, ev.CancelRequested)]
    assert (asked.by, asked.reason) == ("ana (via shared-secret)", "sold out")


def test_a_confirmation_needs_a_credential_and_the_csrf_token(
    console: FlaskClient, shop: Runtime
) -> None:
    _checkouts(shop, "c-9")
    fields = [("csrf", csrf(console)), ("execution_id", "c-9")]
    refused = _confirm(console, "cancel", fields)
    assert refused.status_code == 401  # not signed in
    sign_in(console)
    forged = _confirm(console, "cancel", [("csrf", "x" * 40), ("execution_id", "c-9")])
    assert forged.status_code == 403
    assert asyncio.run(shop.result("c-9")).status == "suspended"


def test_a_preview_of_a_status_the_operation_cannot_act_on_says_so(
    console: FlaskClient, shop: Runtime
) -> None:
    form = {"csrf": csrf(console), "operation": "retry", "status": "running"}
    answer = post(console, "/console/bulk/preview", form)
    assert answer.status_code == 400
    assert "retry acts on executions that are failed, parked, poison" in answer.get_data(
        as_text=True
    )


def test_a_resume_preview_names_each_gate(console: FlaskClient, shop: Runtime) -> None:
    _checkouts(shop, "r-1")
    form = {"csrf": csrf(console), "operation": "resume", "on": "approve", "payload": '"yes"'}
    html = post(console, "/console/bulk/preview", form).get_data(as_text=True)
    assert "approve/r-1:approve" in html
    sign_in(console)
    fields = [
        ("csrf", csrf(console)),
        ("execution_id", "r-1"),
        ("on", "approve"),
        ("payload", '"yes"'),
    ]
    done = _confirm(console, "resume", fields)
    assert done.status_code == 303
    assert asyncio.run(shop.result("r-1")).status == "completed"
