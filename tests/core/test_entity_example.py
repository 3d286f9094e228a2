"""``examples/entity.py``: accounts as entity flows, in the test toolkit (every execute call
is followed by a replay of the whole log)."""

from __future__ import annotations

from typing import Any

from examples import entity

from loom.testing import LoomTestEnv


async def _command(env: LoomTestEnv, eid: str, **cmd: Any) -> Any:
    return await env.runtime.send(eid, "command", cmd)


async def test_transfers_refusals_and_runs() -> None:
    env = LoomTestEnv(entity.app)
    await env.start("account", {"balance": 100, "commands_per_run": 2}, execution_id="alice")
    await env.start("account", {}, execution_id="bob")
    await _command(env, "alice", kind="transfer", amount=30, to="bob")
    await _command(env, "alice", kind="withdraw", amount=500)  # refused: never below zero
    assert await env.runtime.get_event("alice", "refused") == {
        "kind": "withdraw",
        "amount": 500,
        "to": None,
    }
    await _command(env, "alice", kind="deposit", amount=5)
    assert await env.runtime.get_event("alice", "balance") == 75
    assert await env.runtime.get_event("bob", "balance") == 30
    alice = await env.runtime.load_state("alice")
    assert (alice.run, alice.input["applied"]) == (2, 2)
    closed = await _command(env, "alice", kind="close")
    assert (closed.status, closed.output["balance"]) == ("completed", 75)
    history = await env.history("bob")
    assert [e.message_id for e in history if e.type == "MessageReceived"] == ["alice:3"]
