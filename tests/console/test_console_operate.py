"""The console as an operations tool: what a page offers follows what could succeed, its
links between related executions, retry / re-drive / fork from the page (authorized as the
API is), the parked filter, search beyond ids, and what an open page polls."""

from __future__ import annotations

import asyncio
import json
import re

from flask.testing import FlaskClient

from loom.runtime import Runtime
from tests.console.dom import parse, select, text_of
from tests.console.operate import log_of, park
from tests.console.seed import in_doubt
from tests.console.test_console_actions import csrf, post, sign_in
from tests.console.test_console_pages import listed, page


def _forms(html: str) -> set[str]:
    """The actions a page offers: the last segment of each form posting to an execution."""
    return {
        f.attrs["action"].rsplit("/", 1)[1]
        for f in select(html, "form")
        if f.attrs.get("method") == "post" and "/executions/" in f.attrs.get("action", "")
    }


def test_a_cancelled_execution_waits_on_nothing_and_offers_no_resume(
    console: FlaskClient, shop: Runtime
) -> None:
    async def seed() -> None:
        await in_doubt(shop, "order-1", {"amount": 30})
        await shop.verdict("order-1", "1", "performed", output={"charge_id": "c", "amount": 30})
        await shop.cancel("order-1", "customer changed their mind", by="ops")

    asyncio.run(seed())
    html = page(console, "/console/executions/order-1")
    assert "cancelled" in text_of(html, "dd", id="status")
    assert not select(html, "section", id="gates")  # its approval gate is not waited on
    assert not select(html, "tr", class_="gate")
    assert _forms(html) == {"fork"}  # no resume, verdict or cancel: each would be a 409
    assert "nobody" in text_of(html, "dd", id="claim")
    refused = post(
        console,
        "/console/executions/order-1/resume",
        {"csrf": csrf(console), "on": "approve", "correlation_key": "order-1:approve"},
    )
    assert refused.status_code in (401, 409)  # what the API answers, never a 2xx


def test_a_live_execution_offers_what_it_can_take(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(in_doubt(shop, "order-2", {"amount": 30}))
    assert _forms(page(console, "/console/executions/order-2")) == {"verdict", "cancel"}
    asyncio.run(shop.verdict("order-2", "1", "performed", output={"charge_id": "c", "amount": 1}))
    assert _forms(page(console, "/console/executions/order-2")) == {"resume", "cancel"}


def test_a_childs_result_is_listed_after_its_start(console: FlaskClient, shop: Runtime) -> None:
    result = asyncio.run(shop.start("gift", "ada", execution_id="gift-1"))
    assert result.status == "completed"
    seqs = {e.type: e.seq for e in log_of(shop, "gift-1") if e.type != "EventPublished"}
    assert seqs["ExecutionResumed"] < seqs["ChildStarted"]  # the log order the page met
    html = page(console, "/console/executions/gift-1")
    rows = [
        (r.attrs["data-type"], int(r.attrs["data-seq"])) for r in select(html, "tr", class_="event")
    ]
    kinds = [kind for kind, _ in rows]
    assert kinds.index("ChildStarted") < kinds.index("ExecutionResumed")
    assert sorted(seq for _, seq in rows) == [seq for _, seq in sorted(rows, key=lambda r: r[1])]
    assert "before the child's start" in text_of(html, "span", class_="note")


def test_parent_and_child_link_each_other(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(shop.start("gift", "ada", execution_id="gift-2"))
    parent = page(console, "/console/executions/gift-2")
    [child] = select(parent, "tr", class_="child")
    assert child.attrs["data-id"] == "gift-2.child.2"
    assert "completed" in child.text and "echo" in child.text
    shown = page(console, "/console/executions/gift-2.child.2")
    [link] = [a for a in select(shown, "a") if a.attrs["href"] == "/console/executions/gift-2"]
    assert "child flow of" in text_of(shown, "li", id="parent") and link.text == "gift-2"


def test_continue_as_new_runs_are_linked(console: FlaskClient, shop: Runtime) -> None:
    assert asyncio.run(shop.start("tally", 1, execution_id="tally-1")).output == 3
    html = page(console, "/console/executions/tally-1")
    runs = select(html, "a", class_="run")
    assert [r.attrs["data-run"] for r in runs] == ["1", "2", "3"]
    later = runs[-1].attrs["href"]
    assert "from_seq=" in later and select(page(console, later), "tr", class_="event")


def test_retry_a_parked_execution_from_its_page(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(shop.start("echo", {"n": 1}, execution_id="stuck-1", run=False))
    park(shop, "stuck-1", "poison: 5 execute calls in a row claimed it and made no progress")
    html = page(console, "/console/executions/stuck-1")
    assert _forms(html) == {"retry", "cancel"}  # no step recorded yet: nothing to fork from
    before = len(log_of(shop, "stuck-1"))
    refused = post(console, "/console/executions/stuck-1/retry", {"csrf": csrf(console)})
    assert refused.status_code == 401  # not signed in: the retry route's check refuses
    assert len(log_of(shop, "stuck-1")) == before
    assert sign_in(console).status_code == 303
    done = post(console, "/console/executions/stuck-1/retry", {"csrf": csrf(console), "by": "ann"})
    assert done.status_code == 303
    [retried] = [e for e in log_of(shop, "stuck-1") if e.type == "ExecutionRetried"]
    assert retried.by == "ann (via shared-secret)"
    after = page(console, "/console/executions/stuck-1")
    assert "completed" in text_of(after, "dd", id="status")
    assert "retried" in text_of(after, "p", id="notice")


def test_redrive_a_failed_execution_and_follow_the_links(
    console: FlaskClient, shop: Runtime
) -> None:
    assert asyncio.run(shop.start("refund", 7, execution_id="refund-1")).status == "failed"
    html = page(console, "/console/executions/refund-1")
    assert _forms(html) == {"redrive", "fork"}
    [form] = select(html, "form", class_="redrive")
    assert "refund-1.redrive-" in form.text and "confirm" in form.attrs["class"].split()
    assert sign_in(console).status_code == 303
    done = post(console, "/console/executions/refund-1/redrive", {"csrf": csrf(console)})
    assert done.status_code == 303
    target = done.headers["Location"]
    assert target.startswith("/console/executions/refund-1.redrive-")
    redriven = page(console, target)
    assert "forked from" in text_of(redriven, "li", id="forked-from")
    assert "re-driven from refund-1" in text_of(redriven, "p", id="notice")
    original = page(console, "/console/executions/refund-1")
    assert target.rsplit("/", 1)[1] in text_of(original, "li", id="redriven-as")
    assert "redrive" not in _forms(original)  # once is enough: the page links to it instead
    again = post(console, "/console/executions/refund-1/redrive", {"csrf": csrf(console)})
    assert again.status_code == 303 and again.headers["Location"] == "/console/executions/refund-1"


def test_fork_from_a_chosen_step(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(shop.start("gift", "bo", execution_id="gift-3"))
    html = page(console, "/console/executions/gift-3")
    steps = [o.attrs["value"] for o in select(html, "option") if o.attrs.get("value")]
    assert steps[:2] == ["1", "2"]
    sign_in(console)
    form = {"csrf": csrf(console), "from_step": "1", "execution_id": "gift-3b", "by": "cy"}
    done = post(console, "/console/executions/gift-3/fork", form)
    assert done.status_code == 303 and done.headers["Location"] == "/console/executions/gift-3b"
    [started] = log_of(shop, "gift-3b")[:1]
    assert started.forked_from.execution_id == "gift-3" and started.by == "cy (via shared-secret)"
    bad = post(console, "/console/executions/gift-3/fork", {**form, "from_step": "99"})
    assert bad.status_code == 409
    assert "has no step '99'" in text_of(bad.get_data(as_text=True), "p", class_="message")


def test_the_parked_filter_lists_parked_executions_only(
    console: FlaskClient, shop: Runtime
) -> None:
    async def seed() -> None:
        for eid in ("a-1", "a-2", "a-3"):
            await shop.start("echo", 1, execution_id=eid, run=False)
        await shop.start("reminder", "x@example.com", execution_id="sleeps")  # suspended

    asyncio.run(seed())
    park(shop, "a-1", "nondeterminism: step 1: the log has x")
    park(shop, "a-3", "poison: 5 calls")
    html = page(console, "/console/executions?status=parked")
    assert listed(html) == ["a-3", "a-1"]
    assert "active" in select(html, "a", id="parked-filter")[0].attrs["class"].split()
    assert "Looked at 3 executions" in text_of(html, "p", id="scan")


def test_search_by_correlation_key_and_published_value(console: FlaskClient, shop: Runtime) -> None:
    async def seed() -> None:
        await in_doubt(shop, "order-7", {"amount": 30})
        await shop.verdict("order-7", "1", "performed", output={"charge_id": "c", "amount": 1})
        await in_doubt(shop, "order-8", {"amount": 30})
        await shop.start("gift", "ada", execution_id="gift-9")

    asyncio.run(seed())
    assert listed(page(console, "/console/executions?key=order-7:approve")) == ["order-7"]
    assert listed(page(console, "/console/executions?key=order-7")) == []  # exact keys only
    assert listed(page(console, "/console/executions?published=stage%3Dsent")) == ["gift-9"]
    assert listed(page(console, '/console/executions?published=stage%3D"sent"')) == ["gift-9"]
    assert listed(page(console, "/console/executions?published=stage%3Dwrapping")) == []
    assert listed(page(console, "/console/executions?published=stage&flow=gift")) == ["gift-9"]
    many = page(console, "/console/executions?flow=checkout&key=order-7:approve&status=suspended")
    assert listed(many) == ["order-7"]


def test_what_an_open_page_polls_changes_with_the_log(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(in_doubt(shop, "order-3", {"amount": 30}))
    html = page(console, "/console/executions/order-3")
    [body] = select(html, "body")
    assert body.attrs["data-live"] == "/console/executions/order-3/live"
    first = json.loads(console.get(body.attrs["data-live"]).data)
    assert first["token"] == body.attrs["data-live-token"]
    listing = json.loads(console.get("/console/live").data)
    asyncio.run(shop.verdict("order-3", "1", "performed", output={"charge_id": "c", "amount": 1}))
    assert json.loads(console.get(body.attrs["data-live"]).data)["token"] != first["token"]
    assert json.loads(console.get("/console/live").data)["token"] != listing["token"]


def test_values_open_as_json_and_times_carry_their_instant(
    console: FlaskClient, shop: Runtime
) -> None:
    asyncio.run(shop.start("echo", {"n": [1, 2]}, execution_id="e-1"))
    html = page(console, "/console/executions/e-1")
    raws = [a.attrs["href"] for a in select(html, "a", class_="raw")]
    assert raws and all("format=json" in r for r in raws)
    answer = console.get(raws[0])
    assert answer.mimetype == "application/json" and json.loads(answer.data) == {"n": [1, 2]}
    assert len(select(html, "button", class_="copy")) >= 3  # input, output, each event value
    times = [el for el in parse(html) if el.tag == "time"]
    assert times and all(t.attrs["datetime"].endswith("+00:00") for t in times)


def test_the_header_names_who_reads_and_who_acts(console: FlaskClient) -> None:
    html = page(console, "/console/executions")
    assert text_of(html, "span", id="who") == "anonymous (loopback)"
    assert not select(html, "span", id="acting-as")
    sign_in(console)
    html = page(console, "/console/executions")
    assert text_of(html, "span", id="acting-as") == "acting as shared-secret"
    icon = console.get("/console/static/favicon.svg")
    assert icon.status_code == 200 and icon.mimetype == "image/svg+xml"
    assert select(html, "link", rel="icon")[0].attrs["href"] == "/console/static/favicon.svg"


def test_a_deadline_is_shown_as_a_time_not_epoch_seconds(
    console: FlaskClient, shop: Runtime
) -> None:
    asyncio.run(shop.start("reminder", "a@example.com", execution_id="late-1", timeout=7200))
    html = page(console, "/console/executions/late-1")
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", text_of(html, "dd", id="deadline"))
    [started] = [r for r in select(html, "tr", class_="event") if r.attrs["data-seq"] == "1"]
    summary = " ".join(started.text.split())
    assert re.search(r"deadline=\d{4}-\d\d-\d\d", summary), summary
    assert not re.search(r"deadline=1[6-9]\d{8}", summary)
