"""``loom demo``: the example flows end to end on SQLite, no account, no network.

1. ``order.fulfil``: steps (two run concurrently), a gate resumed from outside, a durable
   timer, a charge, a confirmation.
2. ``order.express`` in a worker process that is killed with SIGKILL twice: once after an
   idempotent effect returned (recovery re-invokes it with the same key), once after the
   non-idempotent charge returned (recovery parks it in doubt; an operator verdict resolves
   it; the charge is never silently run again).
3. Both histories replayed from their logs: same results, nothing invoked.
4. Two account entities (``loom.examples.entity``) messaging each other, publishing their
   balances and continuing as new.

The flows ship inside the package (:mod:`loom.examples`), so the demo runs from any folder
after a plain ``pip install``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from typing import Any

from rich.console import Console

from loom.errors import ConfigurationError

console = Console(highlight=False)
APP_REF = "loom.examples.orders:app"


def _kill_worker(store: str, execution_id: str, crash_at: str) -> int:
    """Run one execute call in a child process that SIGKILLs itself at ``crash_at``."""
    env = {**os.environ, "LOOM_CRASH_AT": crash_at, "LOOM_APP": APP_REF, "LOOM_STORE": store}
    proc = subprocess.run(
        [sys.executable, "-m", "loom", "execute", execution_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode


async def run_demo(store_url: str | None = None) -> None:
    """Run the demo; raise if any flow does not end as the demo expects."""
    from loom.cli.base import Embedded, Settings

    if store_url is not None:
        second = await _run_in(Embedded, Settings, store_url)
        console.print(
            f"[green]demo flows completed: 4 of 4[/green] — try "
            f"`loom --store {store_url} show {second}`"
        )
        return
    # A fresh store per run, removed afterwards: runs leave nothing in the temp directory.
    with tempfile.TemporaryDirectory(prefix="loom-demo-") as folder:
        await _run_in(Embedded, Settings, f"sqlite:///{folder}/loom.db")
    console.print(
        "[green]demo flows completed: 4 of 4[/green] — its store is removed; "
        "`loom demo --use-store` runs it in yours (LOOM_STORE) to keep it"
    )


async def _run_in(embedded: Any, settings: Any, url: str) -> str:
    """The demo's three parts on the store ``url``; the id of the in-doubt execution."""
    console.print(f"[bold]Loom demo[/bold] — store {url}")
    async with embedded(settings(APP_REF, url)) as env:
        tag = uuid.uuid4().hex[:6]
        first = await _gate_and_timer(env, f"demo-fulfil-{tag}")
        second = await _crash_and_verdict(env, url, f"demo-express-{tag}")
        await _replay(env, [first, second])
    from loom.cli.demo_entity import entity_section

    await entity_section(url, tag)
    return second


async def _gate_and_timer(env: Any, eid: str) -> str:
    from loom.cli.render import render_timeline, status_text

    console.rule("1. steps, a gate resumed from outside, a durable timer")
    order = {"order_id": "A-1001", "items": ["book", "pen"], "cooling_off_s": 1.0}
    result = await env.runtime.start(
        "order.fulfil", order, execution_id=eid, capabilities={"payments"}
    )
    console.print(status_text(result))
    gate = result.waiting_on[0]
    console.print(f"an approver answers: resume on={gate.on} key={gate.correlation_key}")
    result = await env.runtime.resume(eid, gate.on, gate.correlation_key, {"by": "dana"})
    console.print(status_text(result))
    console.print("the timer is in the store; the dispatcher fires it when due…")
    await env.dispatcher.drain(timers_within=5, timeout=30)
    result = await env.runtime.result(eid)
    render_timeline(result, await env.runtime.history(eid))
    _expect(result.status == "completed", f"{eid} ended {result.status}")
    return eid


async def _crash_and_verdict(env: Any, url: str, eid: str) -> str:
    from loom.cli.render import render_timeline, status_text
    from loom.wire import ExecutionPackage

    console.rule("2. a worker killed mid-flow: recovery and an in-doubt charge")
    order = {"order_id": "B-2002", "items": ["lamp"]}
    await env.runtime.start(
        "order.express", order, execution_id=eid, capabilities={"payments"}, run=False
    )
    code = _kill_worker(url, eid, "after_effect:2")
    console.print(
        f"worker killed (exit {code}) after inventory.reserve returned, before its "
        "completion was recorded"
    )
    code = _kill_worker(url, eid, "after_effect:3")
    console.print(
        f"worker killed (exit {code}) after payments.charge returned, before its "
        "completion was recorded — did the customer pay?"
    )
    result = await env.runtime.execute(ExecutionPackage(execution_id=eid))
    console.print(status_text(result))
    _expect(result.status == "in_doubt", f"{eid} is {result.status}, expected in_doubt")
    doubt = result.in_doubt[0]
    receipt = {"charge_id": f"ch_{doubt.idempotency_key}", "amount": 3400}
    console.print(
        f"the operator checks the payment provider by key {doubt.idempotency_key} "
        f"and records: performed {receipt}"
    )
    result = await env.runtime.verdict(
        eid, doubt.step_id, "performed", output=receipt, by="ops@example.com"
    )
    render_timeline(result, await env.runtime.history(eid))
    _expect(result.status == "completed", f"{eid} ended {result.status}")
    return eid


async def _replay(env: Any, ids: list[str]) -> None:
    from loom.testing import replay

    console.rule("3. replay from the log: same results, nothing invoked")
    for eid in ids:
        outcome = await replay(env.runtime.app, await env.runtime.history(eid))
        stored = await env.runtime.result(eid)
        same = outcome.output == stored.output
        console.print(f"{eid}: replay {outcome.status}, same output: {same}")
        _expect(same and outcome.status == "completed", f"replay of {eid} diverged")


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigurationError(f"demo failed: {message}")
