"""``POST /executions/{id}/retry``: a parked execution runs again, authorized like a verdict.

The execution is parked the way a divergent replay parks it (an ``ExecutionParked`` with a
nondeterminism reason in its log); after "fixed code" is deployed, the retry runs it.
"""

from __future__ import annotations

import asyncio

from flask.testing import FlaskClient

from loom import events as ev
from loom.kernel.decide import Decision, write
from loom.kernel.fold import ExecutionState
from loom.runtime import Runtime
from loom.store.base import StatusChange
from loom.workers.auth import sign
from tests.functions.conftest import BEARER, SECRET
from tests.functions.helpers import assert_error, history, seed


def _park(runtime: Runtime, execution_id: str, reason: str) -> None:
    def decide(_: ExecutionState) -> Decision:
        park = ev.ExecutionParked(reason=reason)
        return Decision([park], StatusChange("suspended", None, reason))

    async def go() -> None:
        await write(runtime, await runtime.load_state(execution_id), decide)

    asyncio.run(go())


def test_retry_needs_auth_runs_a_parked_execution_and_records_who(
    client: FlaskClient, runtime: Runtime
) -> None:
    seed(runtime, "echo", {"n": 2}, "p-1")
    _park(runtime, "p-1", "nondeterminism: step 1: log has effect 'x', flow called 'double'")
    shown = client.get("/executions/p-1?history=false")
    assert shown.json is not None
    assert shown.json["execution"]["parked_reason"].startswith("nondeterminism")
    before = history(runtime, "p-1")
    assert_error(client.post("/executions/p-1/retry"), 401, "unauthenticated")
    forged = {"X-Loom-Signature": sign(SECRET, "verdict", "p-1", b"")}  # another action's
    assert_error(client.post("/executions/p-1/retry", headers=forged), 403, "forbidden")
    assert history(runtime, "p-1") == before
    signed = {
        "X-Loom-Signature": sign(SECRET, "retry", "p-1", b'{"by": "bob"}'),
        "Content-Type": "application/json",
    }
    response = client.post("/executions/p-1/retry", data=b'{"by": "bob"}', headers=signed)
    assert response.status_code == 200, response.json
    assert response.json is not None and response.json["status"] == "completed"
    retried = [e for e in history(runtime, "p-1") if isinstance(e, ev.ExecutionRetried)]
    assert [e.by for e in retried] == ["bob (via shared-secret)"]


def test_retry_of_an_execution_that_is_not_parked_is_refused(
    client: FlaskClient, runtime: Runtime
) -> None:
    seed(runtime, "echo", {"n": 2}, "p-2")
    response = client.post("/executions/p-2/retry", headers=BEARER)
    assert_error(response, 400, "not_parked")
    assert_error(client.post("/executions/nope/retry", headers=BEARER), 404)
