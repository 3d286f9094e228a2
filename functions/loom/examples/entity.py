"""An entity flow: a bank account that lives as long as the account does.

Each account is one execution (its id is the account's). It takes commands from its mailbox
one at a time (``ctx.recv``), publishes its balance for callers (``ctx.set_event``), moves
money to another account by messaging it (``ctx.send``, exactly once per step), and every
``commands_per_run`` commands continues as new, so its history stays short however long it
lives. Try it::

    LOOM_APP=loom.examples.entity:app loom start account --id alice --input '{"balance": 100}'
    LOOM_APP=loom.examples.entity:app loom start account --id bob --input '{}'
    LOOM_APP=loom.examples.entity:app loom send alice command '{"kind": "transfer", "amount": 30, "to": "bob"}'
    LOOM_APP=loom.examples.entity:app loom get-event bob balance
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from loom import FlowContext, Loom

app = Loom("entity")


class Account(BaseModel):
    """What an account carries from one run to the next."""

    balance: int = 0
    commands_per_run: int = 3
    applied: int = 0


class Command(BaseModel):
    """One message on the ``command`` topic."""

    kind: Literal["deposit", "withdraw", "transfer", "close"]
    amount: int = 0
    to: str | None = None


@app.flow("account")
async def account(ctx: FlowContext, state: Account) -> Account:
    """Apply commands until ``close``; continue as new every ``commands_per_run`` of them."""
    balance = state.balance
    await ctx.set_event("balance", balance)
    for _ in range(state.commands_per_run):
        cmd = Command.model_validate(await ctx.recv("command"))
        if cmd.kind == "close":
            return state.model_copy(update={"balance": balance})
        if cmd.kind == "deposit":
            balance += cmd.amount
        elif cmd.amount > balance:
            await ctx.set_event("refused", cmd.model_dump())  # never below zero
            continue
        else:
            balance -= cmd.amount
            if cmd.kind == "transfer" and cmd.to is not None:
                deposit = Command(kind="deposit", amount=cmd.amount)
                await ctx.send(cmd.to, "command", deposit.model_dump())
        await ctx.set_event("balance", balance)
    applied = state.applied + state.commands_per_run
    await ctx.continue_as_new(state.model_copy(update={"balance": balance, "applied": applied}))
