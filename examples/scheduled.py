"""A scheduled flow: a digest built every 15 minutes (Paris time), once per tick."""

from __future__ import annotations

from loom import EffectContext, FlowContext, Loom

app = Loom("scheduled")


@app.effect("digest.build")
async def build(ctx: EffectContext, kind: str) -> str:
    return f"{kind} digest ({ctx.idempotency_key})"


@app.flow("digest")
async def digest(ctx: FlowContext, kind: str) -> str:
    return await ctx.execute(build, kind)


app.schedule("*/15 * * * *", flow="digest", input="quarter-hourly", timezone="Europe/Paris")
app.schedule("0 8 * * mon-fri", flow="digest", input="morning", name="morning", catch_up=1)
