"""The operator console under attack: query parameters the store cannot take, markup in
what executions recorded, cross-site and forged form posts, and paths that try to leave
the console.

The console is served by the ``worker`` target as functions-framework builds it (test
client, loopback peer), over the console tests' shop app on a per-test SQLite file.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from tests.console.seed import in_doubt
from tests.console.test_console_actions import csrf, post, sign_in, verdict_form
from tests.functions.conftest import SECRET
from tests.security.audit.helpers import assert_no_leak

EVIL = '"><img src=x onerror=alert(1)><script>alert(2)</script>'
EVIL_ID = '"><img src=x onerror=alert(1)><svg onload=alert(3)>'  # an id holds no "/"


def page_status(response: Any, status: int) -> str:
    """The answer is an HTML page with ``status``, leaking nothing; its text."""
    body = response.get_data(as_text=True)
    assert response.status_code == status, (response.status_code, body[-500:])
    assert response.mimetype == "text/html"
    assert_no_leak(body)
    return body


@pytest.mark.parametrize(
    "query",
    [
        "from_seq=" + "9" * 30,
        "from_seq=%C2%B2",  # "²": str.isdigit says yes, int() says no
        "from_seq=--5",
        "from_seq=1e3",
    ],
)
def test_a_from_seq_the_store_cannot_take_is_a_400_page(
    console: FlaskClient, shop: Runtime, query: str
) -> None:
    """Attack: an execution page asked for events after a seq of 30 digits (SQLite holds 64
    bits) or after a non-ASCII digit. Promise: 400 naming ``from_seq``, not a 500."""
    asyncio.run(shop.start("echo", {"a": 1}, execution_id="e-1"))
    body = page_status(console.get(f"/console/executions/e-1?{query}"), 400)
    assert "from_seq" in body


@pytest.mark.parametrize("seq", ["9" * 30, "%C2%B2", "-1", "0", "1.0", ""])
def test_a_payload_seq_the_store_cannot_take_is_a_400_page(
    console: FlaskClient, shop: Runtime, seq: str
) -> None:
    """Attack: the on-demand value fetch with a seq of 30 digits, a superscript digit, zero
    or a negative. Promise: 400 naming ``seq``, never a 500; a good seq still answers."""
    asyncio.run(shop.start("echo", {"a": 1}, execution_id="e-1"))
    body = page_status(console.get(f"/console/executions/e-1/payload?seq={seq}&field=input"), 400)
    assert "seq" in body
    good = console.get("/console/executions/e-1/payload?seq=1&field=input")
    assert good.status_code == 200 and json.loads(good.get_data(as_text=True)) == {"a": 1}


def test_markup_in_errors_verdicts_and_flow_names_is_shown_as_text(
    console: FlaskClient, shop: Runtime
) -> None:
    """Attack: markup recorded where the console shows it: a flow's failure message, a
    cancel reason, the name on a verdict, an execution id, and a flow name searched for.
    Promise: every page escapes it (no live ``<img``/``<script``) and forbids inline
    script by its Content-Security-Policy."""
    asyncio.run(shop.start("refund", 5, execution_id=EVIL_ID))  # fails: the refund raises
    asyncio.run(shop.start("reminder", EVIL, execution_id="r-1"))
    asyncio.run(shop.cancel("r-1", EVIL, by=EVIL))
    result = asyncio.run(in_doubt(shop, "order-1", {"amount": 30, "email": EVIL}))
    episode = result.in_doubt[0].episode or 0
    asyncio.run(shop.verdict("order-1", "1", "failed", error=EVIL, by=EVIL, episode=episode))
    urls = [
        "/console/executions",
        f"/console/executions?flow={quote(EVIL)}&q={quote(EVIL)}",
        "/console/in-doubt",
        f"/console/executions/{quote(EVIL_ID, safe='')}",
        "/console/executions/r-1",
        "/console/executions/order-1",
        f"/console/executions/{quote(EVIL_ID, safe='')}/payload?seq=3&field=error",
    ]
    for url in urls:
        response = console.get(url)
        body = response.get_data(as_text=True)
        assert response.status_code in (200, 400), (url, response.status_code)
        for live in ("<img src=x", "<script>alert", "<svg onload"):
            assert live not in body, (url, live)
        policy = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_a_login_or_action_posted_from_another_site_is_refused(
    console: FlaskClient, shop: Runtime
) -> None:
    """Attack: CSRF on the sign-in form (log the operator in as the attacker) and on every
    action, with the browser saying the post is cross-site, with a foreign Origin and no
    Sec-Fetch-Site, with the token of another browser, and as JSON. Promise: 403 (415 for
    JSON), no session cookie set, the execution's log unchanged."""
    result = asyncio.run(in_doubt(shop, "order-1", {"amount": 30}))
    episode = result.in_doubt[0].episode or 0
    before = asyncio.run(shop.history("order-1"))
    token = csrf(console)
    login = {"csrf": token, "token": SECRET}
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
        page_status(post(console, "/console/sign-in", login, headers=headers), 403)
        assert console.get_cookie("loom_console_token", path="/console") is None
    assert sign_in(console).status_code == 303
    forms = {
        "verdict": verdict_form(token, episode, verdict="not_performed"),
        "resume": {"csrf": token, "on": "approve", "correlation_key": "order-1:approve"},
        "cancel": {"csrf": token, "reason": "csrf"},
    }
    for action, form in forms.items():
        url = f"/console/executions/order-1/{action}"
        for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
            page_status(post(console, url, form, headers=headers), 403)
        page_status(post(console, url, {**form, "csrf": "A" * 43}), 403)
        page_status(post(console, url, {k: v for k, v in form.items() if k != "csrf"}), 403)
        assert console.post(url, json=form).status_code == 415
    assert asyncio.run(shop.history("order-1")) == before


@pytest.mark.parametrize(
    "path",
    [
        "/console/executions/..",
        "/console/executions/%2E%2E%2F%2E%2E%2Fhealth",
        "/console/executions/.hidden",
        "/console/executions/a%5Cb/payload?seq=1&field=input",
        "/console/executions/" + "a" * 300,
        "/console/executions/__x__",
        "/console/executions/a%E2%80%AEb",  # a right-to-left override in the id
    ],
)
def test_an_id_that_breaks_the_id_rule_is_a_400_page(console: FlaskClient, path: str) -> None:
    """Attack: path traversal and disguised ids through the console's execution pages.
    Promise: 400 naming the id rule, before anything is read."""
    body = page_status(console.get(path), 400)
    assert "invalid_execution_id" in body


def test_actions_on_an_id_that_breaks_the_rule_append_nothing(
    console: FlaskClient, shop: Runtime
) -> None:
    """Attack: a form posted to an execution path that breaks the id rule. Promise: 400,
    and the store holds no execution under it."""
    sign_in(console)
    token = csrf(console)
    for eid in ("..", ".x", "a%5Cb"):
        response = post(console, f"/console/executions/{eid}/cancel", {"csrf": token})
        page_status(response, 400)
    assert asyncio.run(shop.store.count_by_status())["cancelled"] == 0


def test_a_deadline_past_year_9999_does_not_break_the_pages(client: FlaskClient) -> None:
    """Attack: a start asking for a timeout of 1e300 seconds (allowed: positive and
    finite), so the execution's wake time lies past what a date can hold. Before, every page
    listing it answered 500. Promise: the list, the execution page and the API answer 200;
    the list shows the time as epoch seconds."""
    body = {"flow": "gated", "input": {"n": 1}, "execution_id": "far", "timeout": 1e300}
    started = client.post("/executions", json=body)
    assert started.status_code == 200 and started.json is not None, started.data
    assert started.json["wake_at"] == pytest.approx(1e300)
    for url in ("/console/executions", "/console/executions?q=far"):
        assert "1e+300 (epoch seconds)" in page_status(client.get(url), 200), url
    page_status(client.get("/console/executions/far"), 200)
    assert client.get("/executions/far").status_code == 200


def test_the_console_session_is_no_credential_for_the_api(
    console: FlaskClient, shop: Runtime
) -> None:
    """Attack: a page of another site makes the signed-in operator's browser post a form
    (or ``text/plain``) to the API's mutating routes, hoping the console's session rides
    along. Promise: the session cookie is scoped to ``/console`` and the API reads only
    JSON with its own credential: 401 or 415, and nothing appended."""
    asyncio.run(shop.start("reminder", "a@example.com", execution_id="r-1"))
    before = asyncio.run(shop.history("r-1"))
    assert sign_in(console).status_code == 303
    cookie = console.get_cookie("loom_console_token", path="/console")
    assert cookie is not None and cookie.path == "/console"
    routes = ["/executions/r-1/cancel", "/executions/r-1/resume", "/executions/r-1/messages"]
    for route in routes:
        as_form = post(console, route, {"reason": "csrf"}, headers={"Sec-Fetch-Site": "cross-site"})
        assert as_form.status_code in (401, 415), (route, as_form.status_code)
        as_text = console.post(route, data='{"reason": "csrf"}', content_type="text/plain")
        assert as_text.status_code in (401, 415), (route, as_text.status_code)
    assert asyncio.run(shop.history("r-1")) == before


@pytest.mark.parametrize("episode", ["²", "\u0661", "-1", "0", "3.0", "9" * 30])
def test_a_verdict_form_episode_that_is_no_plain_number_is_a_400_page(
    console: FlaskClient, shop: Runtime, episode: str
) -> None:
    """Attack: the verdict form with an episode ``str.isdigit`` accepts and ``int`` refuses
    ("²", before a 500), a non-ASCII digit, zero, a negative, a float, 30 digits. Promise: a
    400 page, the step still in doubt, nothing appended."""
    asyncio.run(in_doubt(shop, "order-1", {"amount": 30}))
    before = asyncio.run(shop.history("order-1"))
    assert sign_in(console).status_code == 303
    form = {**verdict_form(csrf(console), 1, verdict="failed"), "episode": episode}
    page_status(post(console, "/console/executions/order-1/verdict", form), 400)
    assert asyncio.run(shop.history("order-1")) == before
