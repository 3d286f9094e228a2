"""The console's pages, through the worker target as deployed (functions-framework's app):
what each shows, its filters and paging, escaping, and who may see it."""

from __future__ import annotations

import asyncio
import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from flask.testing import FlaskClient

from loom.runtime import Runtime
from tests.console.dom import parse, select, text_of
from tests.console.seed import claimed, in_doubt


def page(console: FlaskClient, url: str, status: int = 200, **kw: object) -> str:
    response = console.get(url, **kw)  # type: ignore[arg-type]
    assert response.status_code == status, response.data[:2000]
    assert response.mimetype == "text/html"
    return response.get_data(as_text=True)


def listed(html: str) -> list[str]:
    """The execution ids of a page's rows, in order."""
    return [el.attrs["data-id"] for el in parse(html) if el.tag == "tr" and "data-id" in el.attrs]


def count(html: str, status: str) -> int:
    [link] = select(html, "a", data_status=status)
    return int(link.text.split()[-1])


async def seed_mix(shop: Runtime) -> None:
    await in_doubt(shop, "order-1", {"amount": 30, "sku": "mug"})
    await shop.start("checkout", {"amount": 5}, execution_id="order-2", run=False)
    await shop.start("refund", 7, execution_id="refund-1")  # fails at once
    await shop.start("reminder", "a@example.com", execution_id="remind-1")  # suspended
    for i in range(3):
        await shop.start("echo", {"i": i}, execution_id=f"echo-{i}")


def test_the_list_counts_statuses_and_filters(console: FlaskClient, shop: Runtime) -> None:
    asyncio.run(seed_mix(shop))
    html = page(console, "/console/executions")
    assert text_of(html, "span", id="total") == "7"
    expected = {"in_doubt": 1, "running": 1, "failed": 1, "suspended": 1, "completed": 3}
    assert {s: count(html, s) for s in expected} == expected
    assert count(html, "cancelled") == 0
    assert listed(html)[0] == "echo-2"  # newest first
    assert set(listed(html)) == {"order-1", "order-2", "refund-1", "remind-1"} | {
        f"echo-{i}" for i in range(3)
    }
    assert listed(page(console, "/console/executions?status=in_doubt")) == ["order-1"]
    assert listed(page(console, "/console/executions?flow=checkout")) == ["order-2", "order-1"]
    by_flow = page(console, "/console/executions?flow=echo")
    assert count(by_flow, "completed") == 3 and count(by_flow, "in_doubt") == 0
    assert listed(page(console, "/console/executions?q=echo-")) == ["echo-2", "echo-1", "echo-0"]
    assert listed(page(console, "/console/executions?q=remind-1")) == ["remind-1"]
    assert listed(page(console, "/console/executions?q=nothing")) == []


def test_the_time_filter_reads_utc_dates_and_epoch_seconds(
    console: FlaskClient, shop: Runtime
) -> None:
    asyncio.run(shop.start("echo", 1, execution_id="old"))
    time.sleep(1.1)
    cut = time.time()
    asyncio.run(shop.start("echo", 2, execution_id="new"))
    assert listed(page(console, f"/console/executions?from={cut}")) == ["new"]
    assert listed(page(console, f"/console/executions?to={cut}")) == ["old"]
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(cut + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert listed(page(console, f"/console/executions?from={stamp}")) == []
    assert listed(page(console, f"/console/executions?to={stamp}")) == ["new", "old"]


def test_bad_filters_answer_400_naming_the_parameter(console: FlaskClient) -> None:
    html = page(console, "/console/executions?status=bogus", 400)
    assert "status must be one of" in text_of(html, "p", class_="message")
    html = page(console, "/console/executions?from=yesterday", 400)
    assert "from must be a date and time" in text_of(html, "p", class_="message")
    page(console, "/console/executions?after_t=x&after_id=y", 400)
    page(console, "/console/executions/%20bad", 400)  # not a valid id: leading space


def test_the_list_pages_through_every_execution(console: FlaskClient, shop: Runtime) -> None:
    async def seed() -> None:
        for i in range(57):
            await shop.start("echo", i, execution_id=f"e{i:03d}", run=False)

    asyncio.run(seed())
    seen: list[str] = []
    url = "/console/executions?flow=echo"
    while url:
        html = page(console, url)
        seen.extend(listed(html))
        links = select(html, "a", id="next-page")
        url = "/console/executions" + links[0].attrs["href"] if links else ""
        if links:
            assert parse_qs(urlsplit(links[0].attrs["href"]).query)["flow"] == ["echo"]
    assert seen == [f"e{i:03d}" for i in reversed(range(57))]


def test_an_execution_page_shows_its_timeline_gates_timers_and_claim(
    console: FlaskClient, shop: Runtime
) -> None:
    async def seed() -> None:
        await in_doubt(shop, "order-1", {"amount": 30})
        await shop.verdict("order-1", "1", "performed", output={"charge_id": "c", "amount": 30})
        await shop.start("reminder", "a@example.com", execution_id="remind-1")
        await claimed(shop, "busy-1", "worker-7f3a")

    asyncio.run(seed())
    html = page(console, "/console/executions/order-1")
    assert text_of(html, "h1", id="execution-id") == "order-1"
    assert "suspended" in text_of(html, "dd", id="status")
    [gate] = select(html, "tr", class_="gate")
    assert gate.attrs["data-on"] == "approve"
    wake = text_of(html, "td", class_="wake")
    assert re.search(r"\(in 2[34]\.\d h\)$", wake), wake  # the gate's deadline, a day ahead
    events = select(html, "tr", class_="event")
    assert [int(e.attrs["data-seq"]) for e in events] == list(range(1, len(events) + 1))
    kinds = [e.attrs["data-type"] for e in events]
    assert kinds[:4] == ["ExecutionStarted", "EffectStarted", "EffectInDoubt", "EffectVerdict"]
    assert "ExecutionSuspended" in kinds
    bars = {b.attrs["data-step"]: b for b in select(html, "tr", class_="bar")}
    assert set(bars) == {"1", "2"}
    assert "verdict" in bars["1"].text and "completed" in bars["2"].text
    assert select(html, "form", class_="resume") and select(html, "form", class_="cancel")
    assert "nobody" in text_of(html, "dd", id="claim")
    timer = page(console, "/console/executions/remind-1")
    [gate] = select(timer, "tr", class_="gate")
    assert gate.attrs["data-on"] == "loom.timer"
    assert "in 59 min" in text_of(timer, "td", class_="wake")
    busy = page(console, "/console/executions/busy-1")
    assert "worker-7f3a" in text_of(busy, "dd", id="claim")
    page(console, "/console/executions/nope", 404)


def test_the_in_doubt_queue_lists_each_step_with_its_key(
    console: FlaskClient, shop: Runtime
) -> None:
    async def seed() -> None:
        await in_doubt(shop, "order-1", {"amount": 30})
        await in_doubt(shop, "order-2", {"amount": 40})
        await shop.start("echo", 1, execution_id="fine")

    asyncio.run(seed())
    html = page(console, "/console/in-doubt")
    assert text_of(html, "span", id="total") == "2"
    rows = [r for r in select(html, "tr") if "data-step" in r.attrs]
    assert [(r.attrs["data-id"], r.attrs["data-step"]) for r in rows] == [
        ("order-2", "1"),
        ("order-1", "1"),
    ]
    assert [" ".join(k.text.split()) for k in select(html, "code", class_="key")] == [
        "order-2:1",
        "order-1:1",
    ]
    assert {e.text for e in select(html, "td", class_="effect")} == {"payments.charge"}
    forms = select(html, "form", class_="verdict")
    assert [f.attrs["action"] for f in forms] == [
        "/console/executions/order-2/verdict",
        "/console/executions/order-1/verdict",
    ]
    episodes = [i.attrs["value"] for i in select(html, "input", name="episode")]
    assert episodes == ["3", "3"]  # the seq of each EffectInDoubt


def test_user_data_is_escaped_everywhere(console: FlaskClient, shop: Runtime) -> None:
    evil = "<img src=x onerror=alert(1)>"
    payload = {"note": "</pre><script>alert(2)</script>", evil: evil}
    asyncio.run(shop.start("echo", payload, execution_id=evil))
    listing = console.get("/console/executions")
    shown = console.get(f"/console/executions/{evil.replace(' ', '%20')}")
    for response in (listing, shown):
        body = response.get_data(as_text=True)
        assert response.status_code == 200
        assert "<img src=x" not in body and "<script>alert" not in body
        assert "&lt;img src=x onerror=alert(1)&gt;" in body
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert "&lt;/pre&gt;&lt;script&gt;alert(2)" in shown.get_data(as_text=True)
    assert listed(listing.get_data(as_text=True)) == [evil]


def test_a_blob_is_fetched_only_on_demand(console: FlaskClient, shop: Runtime) -> None:
    big = {"blob": "x" * 300_000}
    asyncio.run(shop.start("echo", big, execution_id="big-1"))
    html = page(console, "/console/executions/big-1")
    assert "x" * 1000 not in html  # the page carries the link, not the value
    links = select(html, "a", class_="fetch")
    assert links and len(html) < 50_000
    fetched = console.get(links[0].attrs["href"])
    assert fetched.status_code == 200 and fetched.mimetype == "text/plain"
    assert fetched.headers["X-Content-Type-Options"] == "nosniff"
    assert '"blob": "xxxx' in fetched.get_data(as_text=True)
    missing = console.get("/console/executions/big-1/payload?seq=1&field=error")
    assert missing.status_code == 400
    assert console.get("/console/executions/big-1/payload?seq=1&field=__class__").status_code == 400


def test_static_files_are_served_and_nothing_else(console: FlaskClient) -> None:
    js = console.get("/console/static/console.js")
    assert js.status_code == 200 and js.mimetype == "text/javascript"
    assert console.get("/console/static/..%2Fapp.py").status_code == 404
    assert console.get("/console/static/secret.txt").status_code == 404
    assert console.get("/console").status_code == 303
    assert console.get("/console/nothing-here").status_code == 404


def test_the_execution_page_shows_its_updates_and_streams(
    console: FlaskClient, shop: Runtime
) -> None:
    from loom.errors import UpdateFailedError

    async def seed() -> None:
        await shop.start("basket", execution_id="b-1")
        await shop.update("b-1", "put", "<plum>", update_id="u-plum", by="ada")
        with pytest.raises(UpdateFailedError):
            await shop.update("b-1", "fail", "no room", update_id="u-fail")

    asyncio.run(seed())
    html = page(console, "/console/executions/b-1")
    rows = {
        el.attrs["data-id"]: el.attrs["data-status"] for el in select(html, "tr", class_="update")
    }
    assert rows == {"u-plum": "completed", "u-fail": "failed"}
    [plum] = select(html, "tr", class_="update", data_id="u-plum")
    assert "ada" in plum.text and "put" in plum.text
    assert "no room" in text_of(html, "tr", class_="update", data_id="u-fail")
    assert "<plum>" not in html  # escaped
    assert text_of(html, "p", id="listening").startswith("The flow takes updates")
    [stream] = select(html, "tr", class_="stream", data_key="items")
    assert stream.text.replace(" ", "") == "items1open"
    # The listener's gate is no resume form: no resume there would be admitted.
    assert not select(html, "tr", class_="gate", data_on="loom.update")
    assert select(html, "tr", class_="gate", data_on="close")
