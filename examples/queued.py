"""Queued e-mails: at most 10 at once and 5 new per second, one at a time per customer."""

from __future__ import annotations

from loom import EffectContext, FlowContext, Loom

app = Loom("queued")
app.queue("emails", concurrency=10, rate_per_second=5)


@app.effect("email.send")
async def send(ctx: EffectContext, to: str) -> str:
    return f"sent to {to} ({ctx.idempotency_key})"


@app.flow("send_email")
async def send_email(ctx: FlowContext, to: str) -> str:
    return await ctx.execute(send, to)
