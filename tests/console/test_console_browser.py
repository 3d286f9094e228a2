"""The console in a real browser: Debian's Chromium, headless, driven by Selenium through the
system ``chromedriver`` (nothing downloaded), against ``loom serve`` on loopback.

Each page is checked through its DOM, an operator's verdict is given through the form and
its effect read back through the HTTP API, and every page is saved as a screenshot under
``artifacts/console/`` (gitignored; the README's pictures are copies of these).

Without Chromium the tests skip, saying how to install it; under
``LOOM_REQUIRE_EMULATORS=1`` (CI) they fail instead, unless ``.ci/run`` found it could not
install Chromium (not root, or no apt: ``LOOM_BROWSER_TESTS=0``) and said so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom.runtime import Runtime
from loom.workers.server import build_runtime
from tests import procs
from tests.console.seed import SHOP_REF, in_doubt
from tests.functions.conftest import REPO, SECRET

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "artifacts" / "console"
INSTALL = "apt-get install chromium chromium-driver (bash .ci/run does it)"


def _unavailable(reason: str) -> None:
    message = f"browser tests need the system Chromium: {reason}; install it with {INSTALL}"
    if os.environ.get("LOOM_REQUIRE_EMULATORS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _driver() -> Any:
    if os.environ.get("LOOM_BROWSER_TESTS") == "0":  # .ci/run could not install Chromium
        pytest.skip(f"LOOM_BROWSER_TESTS=0: install Chromium with {INSTALL}")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        _unavailable("chromium or chromedriver is not on PATH")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("the selenium package is not installed (pip install -e '.[test]')")
        raise
    options = Options()
    options.binary_location = str(chromium)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,860")
    options.add_argument("--force-device-scale-factor=1")
    service = Service(executable_path=str(chromedriver))
    return webdriver.Chrome(service=service, options=options)


async def _seed(shop: Runtime) -> None:
    """A morning's work of a small shop: every state the console shows."""
    for i in range(6):
        await shop.start("echo", {"order": 990 + i}, execution_id=f"receipt-{990 + i}")
    await in_doubt(shop, "order-1001", {"amount": 4200, "sku": "kettle", "email": "kim@x.io"})
    await shop.verdict("order-1001", "1", "performed", output={"charge_id": "ch_9", "amount": 1})
    await shop.resume("order-1001", "approve", "order-1001:approve", {"by": "lee"})
    await in_doubt(shop, "order-1002", {"amount": 1999, "sku": "mug", "email": "ana@x.io"})
    await shop.verdict("order-1002", "1", "performed", output={"charge_id": "ch_7", "amount": 1})
    await shop.start("reminder", "sam@x.io", execution_id="remind-sam")
    await shop.start("refund", 1999, execution_id="refund-17")
    await shop.start("echo", {"scan": "x" * 300_000}, execution_id="upload-big")
    await in_doubt(shop, "order-1003", {"amount": 2500, "sku": "teapot"})
    await in_doubt(shop, "order-1004", {"amount": 899, "sku": "spoon"})
    await shop.start("reminder", "kim@x.io", execution_id="remind-kim")
    await shop.cancel("remind-kim", "customer unsubscribed", by="ops")


@dataclass
class Site:
    base: str
    driver: Any
    shop: Runtime

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def shot(self, name: str) -> Path:
        """Save the page as ``artifacts/console/<name>.png``."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        height = self.driver.execute_script("return document.body.scrollHeight")
        self.driver.set_window_size(1280, max(860, min(int(height) + 40, 2400)))
        path = ARTIFACTS / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), path
        self.driver.set_window_size(1280, 860)
        return path

    def api(self, execution_id: str) -> dict[str, Any]:
        response = httpx.get(f"{self.base}/executions/{execution_id}", timeout=30)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """``loom serve`` over a seeded store, and a headless Chromium pointed at it."""
    driver = _driver()
    where = tmp_path_factory.mktemp("console")
    store = f"sqlite:///{where / 'loom.db'}"
    shop = build_runtime(SHOP_REF, store)
    try:
        asyncio.run(_seed(shop))
        port = procs.free_port()
        argv = [sys.executable, "-m", "loom", "--app", SHOP_REF, "--store", store, "serve"]
        env = {"PYTHONPATH": str(REPO), "LOOM_RESUME_SECRET": SECRET}
        with procs.running(
            "loom-serve-console",
            [*argv, "--port", str(port)],
            port=port,
            log_path=where / "serve.log",
            ready_path="/health",
            env=env,
        ) as server:
            yield Site(f"http://{server.host}", driver, shop)
    finally:
        driver.quit()
        asyncio.run(shop.store.aclose())


def _by() -> Any:
    from selenium.webdriver.common.by import By

    return By


def css(site: Site, selector: str) -> list[Any]:
    return site.driver.find_elements(_by().CSS_SELECTOR, selector)


def one(site: Site, selector: str) -> Any:
    found = css(site, selector)
    assert len(found) == 1, (selector, len(found))
    return found[0]


def wait_for(site: Site, condition: Any, timeout: float = 10.0) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A page that redraws itself (live updates) may replace an element between two looks.
    wait = WebDriverWait(site.driver, timeout, ignored_exceptions=(StaleElementReferenceException,))
    return wait.until(condition)


def test_the_executions_list(site: Site) -> None:
    site.open("/console/executions")
    assert one(site, "#total").text == "14"
    counts = {
        a.get_attribute("data-status"): a.text.split()[-1]
        for a in css(site, "#counts a[data-status]")
    }
    assert counts == {
        "running": "0",
        "suspended": "2",
        "in_doubt": "2",
        "completed": "8",
        "failed": "1",
        "cancelled": "1",
    }
    rows = [r.get_attribute("data-id") for r in css(site, "#executions tbody tr")]
    assert rows[:3] == ["remind-kim", "order-1004", "order-1003"]
    site.shot("executions")
    # Filter by status with the form, then search by id.
    from selenium.webdriver.support.ui import Select

    Select(one(site, "select[name=status]")).select_by_value("in_doubt")
    one(site, "#filters button").click()
    wait_for(site, lambda d: "status=in_doubt" in d.current_url)
    rows = [r.get_attribute("data-id") for r in css(site, "#executions tbody tr")]
    assert rows == ["order-1004", "order-1003"]
    site.open("/console/executions?q=remind-")
    rows = [r.get_attribute("data-id") for r in css(site, "#executions tbody tr")]
    assert rows == ["remind-kim", "remind-sam"]
    site.open("/console/executions?flow=checkout")
    assert one(site, "#counts a[data-status=in_doubt]").text.split()[-1] == "2"
    site.shot("executions-filtered")


def test_an_execution_timeline(site: Site) -> None:
    site.open("/console/executions?q=order-1002")
    one(site, "#executions tbody a").click()
    wait_for(site, lambda d: d.current_url.endswith("/console/executions/order-1002"))
    assert one(site, "#execution-id").text == "order-1002"
    assert one(site, "#status").text == "suspended"
    bars = {b.get_attribute("data-step"): b for b in css(site, "#steps tr.bar")}
    assert set(bars) == {"1", "2"}
    assert bars["2"].find_elements(_by().CSS_SELECTOR, "rect")  # drawn as a bar
    assert one(site, "#gates tr.gate").get_attribute("data-on") == "approve"
    events = [e.get_attribute("data-type") for e in css(site, "#timeline tr.event")]
    assert events[:4] == ["ExecutionStarted", "EffectStarted", "EffectInDoubt", "EffectVerdict"]
    started = one(site, "tr.event[data-seq='1'] details")
    assert not started.find_element(_by().TAG_NAME, "pre").is_displayed()
    started.find_element(_by().TAG_NAME, "summary").click()  # expand the input
    assert '"sku": "mug"' in started.find_element(_by().TAG_NAME, "pre").text
    site.shot("execution")
    # A value held in a blob is fetched when the operator asks for it, by the page's script.
    site.open("/console/executions/upload-big")
    details = one(site, "tr.event[data-seq='1'] details")
    details.find_element(_by().TAG_NAME, "summary").click()
    details.find_element(_by().CSS_SELECTOR, "a.fetch").click()
    fetched = details.find_element(_by().CSS_SELECTOR, "pre.fetched")
    wait_for(site, lambda d: '"scan": "xxxx' in fetched.text)
    assert site.driver.current_url.endswith("/console/executions/upload-big")
    site.open("/console/executions/refund-17")
    assert "card network refused" in one(site, "#error-value").text
    site.open("/console/executions/remind-sam")
    assert one(site, "#gates tr.gate").get_attribute("data-on") == "loom.timer"
    assert "in 59 min" in one(site, "#gates td.wake").text


def test_a_verdict_given_in_the_in_doubt_queue(site: Site) -> None:
    site.open("/console/sign-in")
    one(site, "input[name=token]").send_keys(SECRET)
    one(site, "#sign-in-form button").click()
    wait_for(site, lambda d: d.current_url.endswith("/console/executions"))
    site.open("/console/in-doubt")
    rows = css(site, "#in-doubt tbody tr")
    assert [(r.get_attribute("data-id"), r.get_attribute("data-step")) for r in rows] == [
        ("order-1004", "1"),
        ("order-1003", "1"),
    ]
    assert [k.text for k in css(site, "#in-doubt code.key")] == ["order-1004:1", "order-1003:1"]
    assert {e.text for e in css(site, "#in-doubt td.effect")} == {"payments.charge"}
    site.shot("in-doubt")
    form = one(site, "form.verdict[action='/console/executions/order-1003/verdict']")
    form.find_element(_by().CSS_SELECTOR, "input[value=performed]").click()
    output = form.find_element(_by().NAME, "output")
    output.send_keys('{"charge_id": "ch_from_the_bank", "amount": 2500}')
    form.find_element(_by().NAME, "by").send_keys("ana")
    form.find_element(_by().CSS_SELECTOR, "button").click()
    wait_for(site, lambda d: d.find_elements(_by().ID, "notice"))
    assert site.driver.current_url.endswith("/console/executions/order-1003")
    assert "verdict performed recorded" in one(site, "#notice").text
    view = site.api("order-1003")
    assert view["execution"]["status"] == "suspended"  # moved on to the approval gate
    [given] = [e for e in view["history"] if e["type"] == "EffectVerdict"]
    assert given["by"] == "ana (via shared-secret)"
    assert given["output"] == {"charge_id": "ch_from_the_bank", "amount": 2500}
    site.shot("after-verdict")
    site.open("/console/in-doubt")
    assert [r.get_attribute("data-id") for r in css(site, "#in-doubt tbody tr")] == ["order-1004"]


def test_resume_and_cancel_from_the_execution_page(site: Site) -> None:
    site.open("/console/executions/order-1002")
    form = one(site, "#gates form.resume")
    form.find_element(_by().NAME, "payload").send_keys('{"by": "lee"}')
    form.find_element(_by().CSS_SELECTOR, "button").click()
    wait_for(site, lambda d: d.find_elements(_by().ID, "notice"))
    assert site.api("order-1002")["execution"]["status"] == "completed"
    assert one(site, "#status").text == "completed"
    site.open("/console/executions/remind-sam")
    one(site, "form.cancel input[name=reason]").send_keys("not needed")
    one(site, "form.cancel button").click()
    wait_for(site, lambda d: d.switch_to.alert).accept()  # the page asks before cancelling
    wait_for(site, lambda d: d.find_elements(_by().ID, "notice"))
    view = site.api("remind-sam")
    assert view["execution"]["status"] == "cancelled"
    assert view["history"][-1]["reason"] == "not needed"


def test_a_refused_request_shows_why(site: Site) -> None:
    site.open("/console/executions?status=nope")
    assert "400" in one(site, "#error h1").text
    assert "status must be one of" in one(site, "#error .message").text
    site.shot("error")
    site.open("/console/sign-in")
    token = one(site, "#sign-in-form input[name=token]")
    assert token.get_attribute("type") == "password"
    assert one(site, "#sign-in-form input[name=csrf]").get_attribute("value")
    site.shot("sign-in")


# -- the console as an operations tool -------------------------------------------------------


def test_an_open_page_follows_its_execution(site: Site) -> None:
    asyncio.run(site.shop.start("reminder", "liv@x.io", execution_id="live-1"))
    site.open("/console/executions/live-1")
    wait_for(site, lambda d: one(site, "body").get_attribute("data-following") == "yes")
    assert one(site, "#gates tr.gate").get_attribute("data-on") == "loom.timer"
    asyncio.run(site.shop.cancel("live-1", "changed from elsewhere", by="ops"))
    # No reload by the test: the page polls its last seq and redraws itself.
    # (While the page reloads the element is briefly absent: look, do not insist.)
    wait_for(site, lambda d: [e.text for e in css(site, "#status")] == ["cancelled"])
    assert not css(site, "#gates") and not css(site, "form.resume") and not css(site, "form.cancel")


def test_times_in_local_time_dark_mode_and_the_signed_in_principal(site: Site) -> None:
    driver = site.driver
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Tokyo"})
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    try:
        site.open("/console/executions")
        first = css(site, "#executions tbody time")[0]
        local = first.find_element(_by().XPATH, "following-sibling::span[@class='local']")
        assert "Asia/Tokyo" in local.text and first.text.endswith("Z")
        background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(16, 21, 27)"  # the dark palette
        assert "acting as shared-secret" in one(site, "#acting-as").text
        site.shot("executions-dark")
    finally:
        driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    site.open("/console/executions")
    light = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert light == "rgb(247, 248, 250)"
    icon = driver.execute_script("return document.querySelector('link[rel=icon]').href")
    assert httpx.get(icon, timeout=10).headers["content-type"].startswith("image/svg+xml")


def test_redrive_a_failed_execution_from_its_page(site: Site) -> None:
    site.open("/console/executions/refund-17")
    form = one(site, "form.redrive")
    assert "refund-17.redrive-" in form.text
    site.shot("execution-failed")
    form.find_element(_by().NAME, "by").clear()
    form.find_element(_by().NAME, "by").send_keys("kim")
    form.find_element(_by().CSS_SELECTOR, "button").click()
    wait_for(site, lambda d: d.switch_to.alert).accept()  # asked once, as a cancel is
    wait_for(site, lambda d: "/console/executions/refund-17.redrive-" in d.current_url)
    assert "forked from" in one(site, "#forked-from").text
    redrive_id = site.driver.current_url.rsplit("/", 1)[1]
    [started] = site.api(redrive_id)["history"][:1]
    assert started["by"] == "kim (via shared-secret)"
    site.shot("redrive")
    one(site, "#forked-from a").click()
    wait_for(site, lambda d: d.current_url.endswith("/console/executions/refund-17"))
    assert redrive_id in one(site, "#redriven-as").text


def test_fork_a_completed_execution_from_a_step(site: Site) -> None:
    site.open("/console/executions/order-1001")
    from selenium.webdriver.support.ui import Select

    form = one(site, "form.fork")
    Select(form.find_element(_by().NAME, "from_step")).select_by_value("2")
    form.find_element(_by().NAME, "execution_id").send_keys("order-1001-again")
    form.find_element(_by().CSS_SELECTOR, "button").click()
    wait_for(site, lambda d: d.switch_to.alert).accept()
    wait_for(site, lambda d: d.current_url.endswith("/console/executions/order-1001-again"))
    assert "order-1001" in one(site, "#forked-from").text
    assert site.api("order-1001-again")["history"][0]["forked_from"]["step_id"] == "2"


def test_park_filter_retry_and_search(site: Site) -> None:
    from tests.console.operate import park

    asyncio.run(site.shop.start("echo", {"n": 5}, execution_id="stuck-7", run=False))
    park(site.shop, "stuck-7", "poison: 5 execute calls in a row claimed it and made no progress")
    site.open("/console/executions")
    one(site, "#parked-filter").click()
    wait_for(site, lambda d: "status=parked" in d.current_url)
    assert [r.get_attribute("data-id") for r in css(site, "#executions tbody tr")] == ["stuck-7"]
    site.shot("parked")
    one(site, "#executions tbody a").click()
    wait_for(site, lambda d: d.current_url.endswith("/console/executions/stuck-7"))
    one(site, "form.retry button").click()
    wait_for(site, lambda d: d.switch_to.alert).accept()
    wait_for(site, lambda d: d.find_elements(_by().ID, "notice"))
    assert site.api("stuck-7")["execution"]["status"] == "completed"
    asyncio.run(site.shop.start("gift", "ada", execution_id="gift-ada"))
    site.open("/console/executions")
    one(site, "#filters input[name=published]").send_keys("stage=sent")
    one(site, "#filters button").click()
    wait_for(site, lambda d: "published=" in d.current_url)
    assert [r.get_attribute("data-id") for r in css(site, "#executions tbody tr")] == ["gift-ada"]
    site.shot("search")
    site.open("/console/executions?key=order-1004:1")  # the in-doubt charge's timer key? none
    assert css(site, "#empty")


def test_parent_and_child_pages_link_and_values_copy(site: Site) -> None:
    site.open("/console/executions/gift-ada")
    [child] = css(site, "#children tr.child")
    assert child.get_attribute("data-id") == "gift-ada.child.2"
    events = [e.get_attribute("data-type") for e in css(site, "#timeline tr.event")]
    assert events.index("ChildStarted") < events.index("ExecutionResumed")
    site.shot("lineage")
    output = one(site, "#output").find_element(_by().XPATH, "..")
    output.find_element(_by().CSS_SELECTOR, "button.copy").click()
    wait_for(site, lambda d: output.find_element(_by().CSS_SELECTOR, "button.copy").text != "copy")
    assert (
        output.find_element(_by().CSS_SELECTOR, "button.copy").get_attribute("data-copied") == "yes"
    )
    child.find_element(_by().TAG_NAME, "a").click()
    wait_for(site, lambda d: d.current_url.endswith("/console/executions/gift-ada.child.2"))
    one(site, "#parent a").click()
    wait_for(site, lambda d: d.current_url.endswith("/console/executions/gift-ada"))
