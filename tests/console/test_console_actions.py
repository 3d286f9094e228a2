"""The console's actions (verdict, resume, cancel) and who may see the console at all: the
same checks as the API, CSRF-safe, and nothing appended by a refused request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from tests.console.dom import select, text_of
from tests.console.seed import in_doubt
from tests.functions.conftest import SECRET

FORM = "application/x-www-form-urlencoded"


def csrf(console: FlaskClient) -> str:
    """Load a page (which sets the CSRF cookie) and return the token its forms carry."""
    html = console.get("/console/executions").get_data(as_text=True)
    cookie = console.get_cookie("loom_console_csrf", path="/console")
    assert cookie is not None
    assert {i.attrs["value"] for i in select(html, "input", name="csrf")} <= {cookie.value}
    return cookie.value


def sign_in(console: FlaskClient, token: str = SECRET) -> Any:
    return console.post("/console/sign-in", data={"csrf": csrf(console), "token": token})


def post(console: FlaskClient, url: str, form: dict[str, str], **kw: Any) -> Any:
    return console.post(url, data=form, content_type=FORM, **kw)


def api_state(console: FlaskClient, eid: str) -> dict[str, Any]:
    """Where the execution stands, read through the HTTP API."""
    response = console.get(f"/executions/{eid}")
    assert response.status_code == 200
    return json.loads(response.data)


def verdict_form(token: str, episode: int, **extra: str) -> dict[str, str]:
    return {"csrf": token, "step_id": "1", "episode": str(episode), **extra}


def test_a_verdict_through_the_form_moves_the_execution_on(
    console: FlaskClient, shop: Runtime
) -> None:
    result = asyncio.run(in_doubt(shop, "order-1", {"amount": 30}))
    episode = result.in_doubt[0].episode
    assert episode is not None
    assert sign_in(console).status_code == 303
    output = json.dumps({"charge_id": "ch_real", "amount": 30})
    form = verdict_form(csrf(console), episode, verdict="performed", output=output, by="ana")
    answer = post(console, "/console/executions/order-1/verdict", form)
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/console/executions/order-1"
    state = api_state(console, "order-1")
    assert state["execution"]["status"] == "suspended"  # charged, reserved, awaiting approval
    [given] = [e for e in state["history"] if e["type"] == "EffectVerdict"]
    assert (given["verdict"], given["episode"], given["by"]) == (
        "performed",
        episode,
        "ana (via shared-secret)",
    )
    shown = console.get(answer.headers["Location"]).get_data(as_text=True)
    assert "verdict performed recorded on step 1" in text_of(shown, "p", id="notice")
    reload = console.get(answer.headers["Location"]).get_data(as_text=True)
    assert not select(reload, "p", id="notice")  # said once
    forged = console.get("/console/executions/order-1?notice=pay+evil.example").get_data(
        as_text=True
    )
    assert not select(forged, "p", id="notice")
    again = post(console, "/console/executions/order-1/verdict", form)
    assert again.status_code == 400  # the step is no longer in doubt: nothing to settle
    assert "not in doubt" in again.get_data(as_text=True)


def test_refused_verdicts_append_nothing(console: FlaskClient, shop: Runtime) -> None:
    result = asyncio.run(in_doubt(shop, "order-1", {"amount": 30}))
    episode = result.in_doubt[0].episode or 0
    url = "/console/executions/order-1/verdict"
    before = api_state(console, "order-1")["execution"]["last_seq"]
    token = csrf(console)
    good = verdict_form(token, episode, verdict="not_performed")
    assert post(console, url, good).status_code == 401  # not signed in: no credential
    assert sign_in(console, "wrong-secret-0123456789").status_code == 403
    assert sign_in(console).status_code == 303
    no_token = {k: v for k, v in good.items() if k != "csrf"}
    assert post(console, url, no_token).status_code == 403
    assert post(console, url, {**good, "csrf": "x" * 43}).status_code == 403
    foreign = {"Origin": "https://evil.example"}
    assert post(console, url, good, headers=foreign).status_code == 403
    same_site = {"Origin": "https://evil.example", "Sec-Fetch-Site": "same-site"}
    assert post(console, url, good, headers=same_site).status_code == 403
    assert post(console, url, good, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    stale = verdict_form(token, episode + 1, verdict="not_performed")
    answer = post(console, url, stale)
    assert answer.status_code == 409 and "stale_verdict" in answer.get_data(as_text=True)
    bad_output = verdict_form(token, episode, verdict="performed", output="{nope")
    assert post(console, url, bad_output).status_code == 400
    assert post(console, url, verdict_form(token, episode, verdict="maybe")).status_code == 400
    as_json = console.post(url, json=good)
    assert as_json.status_code == 415
    assert api_state(console, "order-1")["execution"]["last_seq"] == before


def test_resume_and_cancel_through_their_forms(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(in_doubt(shop, "order-1", {"amount": 30}))
    asyncio.run(shop.verdict("order-1", "1", "performed", output={"charge_id": "c", "amount": 1}))
    asyncio.run(shop.start("reminder", "a@example.com", execution_id="remind-1"))
    token = csrf(console)
    resume = {"csrf": token, "on": "approve", "correlation_key": "order-1:approve"}
    resume["payload"] = '{"by": "boss"}'
    assert post(console, "/console/executions/order-1/resume", resume).status_code == 401
    sign_in(console)
    assert post(console, "/console/executions/order-1/resume", resume).status_code == 303
    state = api_state(console, "order-1")["execution"]
    assert state["status"] == "completed"
    assert state["output"]["approval"] == {"by": "boss"}
    cancel = {"csrf": token, "reason": "customer asked"}
    assert post(console, "/console/executions/remind-1/cancel", cancel).status_code == 303
    view = api_state(console, "remind-1")
    assert view["execution"]["status"] == "cancelled"
    assert view["history"][-1]["reason"] == "customer asked"
    again = post(console, "/console/executions/remind-1/cancel", cancel)
    assert again.status_code == 409  # already cancelled


def test_sign_out_forgets_the_credential(console: FlaskClient, shop: Runtime) -> None:
    sign_in(console)
    assert console.get_cookie("loom_console_token", path="/console") is not None
    assert post(console, "/console/sign-out", {"csrf": csrf(console)}).status_code == 303
    assert console.get_cookie("loom_console_token", path="/console") is None
    assert post(console, "/console/sign-out", {}).status_code == 403  # CSRF-checked too


def test_the_session_cookie_is_http_only_and_same_site(console: FlaskClient) -> None:
    answer = sign_in(console)
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain HTTP on loopback: a Secure cookie would be dropped
    token = csrf(console)
    behind_tls = console.post(
        "/console/sign-in",
        data={"csrf": token, "token": SECRET},
        headers={"X-Forwarded-Proto": "https"},
    )
    assert "Secure" in behind_tls.headers["Set-Cookie"]  # Cloud Run terminates TLS in front


def test_anonymous_readers_must_be_on_loopback(console: FlaskClient) -> None:
    remote = console.get("/console/executions", environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert remote.status_code == 401
    assert "LOOM_CALLER_AUTH" in remote.get_data(as_text=True)
    # A page that a DNS-rebinding site got a browser to load names a foreign host.
    rebound = console.get("/console/executions", headers={"Host": "evil.example:8080"})
    assert rebound.status_code == 401
    assert console.get("/console/executions", headers={"Host": "127.0.0.1:8080"}).status_code == 200


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch, shop_env: dict[str, str]) -> FlaskClient:
    """The worker with a caller authenticator: every console page runs it."""
    import functions_framework

    from tests.functions.conftest import MAIN

    monkeypatch.setenv("LOOM_CALLER_AUTH", "tests.console.callers:operators")
    return functions_framework.create_app("worker", str(MAIN)).test_client()


def test_with_a_caller_check_every_page_runs_it(guarded: FlaskClient, shop: Runtime) -> None:
    asyncio.run(in_doubt(shop, "order-1", {"amount": 30}))
    remote = {"REMOTE_ADDR": "10.1.2.3"}
    for url in ("/console/executions", "/console/in-doubt", "/console/executions/order-1"):
        assert guarded.get(url, environ_base=remote).status_code == 401
        answer = guarded.get(url, environ_base=remote, headers={"Authorization": "Bearer op"})
        assert answer.status_code == 200, url
        assert text_of(answer.get_data(as_text=True), "span", id="who") == "ops@example.com"
    payload = "/console/executions/order-1/payload?seq=1&field=input"
    assert guarded.get(payload, environ_base=remote).status_code == 401
    # The signed-in credential stands in for the header a browser cannot add.
    html = guarded.get("/console/sign-in").get_data(as_text=True)
    token = select(html, "input", name="csrf")[0].attrs["value"]
    signed = guarded.post("/console/sign-in", data={"csrf": token, "token": "op"})
    assert signed.status_code == 303
    assert guarded.get("/console/executions", environ_base=remote).status_code == 200
    # The verdict is recorded as the caller's principal, as the API records it.
    form = verdict_form(token, 3, verdict="not_performed")
    answer = post(guarded, "/console/executions/order-1/verdict", form, environ_base=remote)
    assert answer.status_code == 403  # the caller passes, the verdict check refuses "op"
    sign_in_secret = guarded.post("/console/sign-in", data={"csrf": token, "token": SECRET})
    assert sign_in_secret.status_code == 303
    headers = {"Authorization": "Bearer op"}
    answer = post(
        guarded, "/console/executions/order-1/verdict", form, environ_base=remote, headers=headers
    )
    assert answer.status_code == 303
    view = json.loads(guarded.get("/executions/order-1", headers=headers).data)
    [given] = [e for e in view["history"] if e["type"] == "EffectVerdict"]
    assert given["by"] == "ops@example.com"
