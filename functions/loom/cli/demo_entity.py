"""``loom demo``'s entity section: two account executions messaging each other, publishing
their balances and continuing as new (the flows of :mod:`loom.examples.entity`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from loom.errors import ConfigurationError

console = Console(highlight=False)
APP_REF = "loom.examples.entity:app"
COMMANDS: list[dict[str, Any]] = [
    {"kind": "deposit", "amount": 50},
    {"kind": "transfer", "amount": 30, "to": "{bob}"},
    {"kind": "withdraw", "amount": 500},
    {"kind": "transfer", "amount": 20, "to": "{bob}"},
    {"kind": "deposit", "amount": 5},
    {"kind": "deposit", "amount": 10},
]


async def entity_section(url: str, tag: str) -> list[str]:
    """Run the section on the store at ``url``; return the executions it made."""
    from loom.cli.base import Embedded, Settings
    from loom.cli.render import status_text

    console.rule("4. entities: messages between executions, published state, continue-as-new")
    alice, bob = f"demo-alice-{tag}", f"demo-bob-{tag}"
    async with Embedded(Settings(APP_REF, url)) as env:
        rt = env.runtime
        await rt.start("account", {"balance": 100}, execution_id=alice)
        await rt.start("account", {}, execution_id=bob)
        for command in COMMANDS:
            to = command.get("to")
            sent = {**command, "to": bob} if to else command
            await rt.send(alice, "command", sent)
            console.print(f"to {alice}: {sent}")
        balances = [await rt.get_event(eid, "balance") for eid in (alice, bob)]
        run = (await rt.load_state(alice)).run
        console.print(f"balances published: {balances}; {alice} is on run {run}")
        for eid in (alice, bob):
            await rt.send(eid, "command", {"kind": "close"})
            console.print(status_text(await rt.result(eid)))
        _expect(balances == [115, 50] and run == 3, f"balances {balances}, run {run}")
        await _replay(rt, [alice, bob])
    return [alice, bob]


async def _replay(rt: Any, ids: list[str]) -> None:
    from loom.testing import replay

    for eid in ids:
        outcome = await replay(rt.app, await rt.history(eid))
        same = outcome.output == (await rt.result(eid)).output
        console.print(f"{eid}: replay of its last run {outcome.status}, same output: {same}")
        _expect(same and outcome.status == "completed", f"replay of {eid} diverged")


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigurationError(f"demo failed: {message}")
