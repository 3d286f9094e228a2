"""``GET /executions/{id}`` pages its history: at most ``limit`` events (default 1,000) after
``after``, ``next_after`` while more follow; the runs of a page are named as the log names
them; bad paging parameters are a 400 naming them."""

from __future__ import annotations

import asyncio
from typing import Any

from flask.testing import FlaskClient

from loom import events as ev
from loom.runtime import Runtime
from loom.store.base import AppendRequest
from tests.functions.helpers import assert_error, seed


def grow(runtime: Runtime, eid: str, count: int) -> None:
    """Append ``count`` recorded decisions to a seeded execution (a long history)."""

    async def go() -> None:
        last = (await runtime.store.summary(eid)).last_seq
        for start in range(0, count, 400):
            batch: list[ev.Event] = [
                ev.DecisionRecorded(step_id=f"d{n}", kind="random", value=n)
                for n in range(start, min(start + 400, count))
            ]
            ev.number(batch, last, 1.0)
            last = await runtime.store.append(AppendRequest(eid, last, batch))

    asyncio.run(go())


def test_a_long_history_comes_in_pages(client: FlaskClient, runtime: Runtime) -> None:
    seed(runtime, "gated", {"n": 1}, "long")
    grow(runtime, "long", 2_499)
    seen: list[int] = []
    after: Any = 0
    pages = 0
    while after is not None:
        answer = client.get(f"/executions/long?after={after}")
        assert answer.status_code == 200, answer.data
        body = answer.json
        assert body is not None and len(body["history"]) <= 1000
        seen += [e["seq"] for e in body["history"]]
        assert body["execution"]["last_seq"] == 2_500
        after, pages = body["next_after"], pages + 1
    assert seen == list(range(1, 2_501)) and pages == 3
    small = client.get("/executions/long?after=100&limit=5").json
    assert small is not None and [e["seq"] for e in small["history"]] == [101, 102, 103, 104, 105]
    assert small["next_after"] == 105
    assert small["runs"] == [{"run_id": "long#run1", "run": 1, "first_seq": 101, "last_seq": 105}]


def test_a_short_history_is_whole_with_its_runs(client: FlaskClient, runtime: Runtime) -> None:
    seed(runtime, "echo", {"n": 1}, "short")
    body = client.get("/executions/short").json
    assert body is not None and body["next_after"] is None
    assert [r["run_id"] for r in body["runs"]] == ["short#run1"]


def test_bad_paging_parameters_are_refused(client: FlaskClient, runtime: Runtime) -> None:
    seed(runtime, "echo", {"n": 1}, "p")
    for query in ("after=-1", "after=x", "limit=0", "limit=10001", "limit=1.5"):
        body = assert_error(client.get(f"/executions/p?{query}"), 400, "invalid_request")
        assert query.split("=")[0] in body["message"]
