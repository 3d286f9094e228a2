"""An app with schedules, for the schedule tests (loaded by reference by ``loom serve``)."""

from __future__ import annotations

from typing import Any

from loom import EffectContext, FlowContext, Loom

app = Loom("scheduled")


@app.effect("report.write")
async def write(ctx: EffectContext, value: Any) -> str:
    return f"report {value}"


@app.flow("report")
async def report(ctx: FlowContext, value: Any) -> str:
    return await ctx.execute(write, value)


app.schedule("*/5 * * * *", flow="report", input={"kind": "five"}, name="every-5")
app.schedule("0 * * * *", flow="report", input="hourly", name="hourly", catch_up=3)
app.schedule("* * * * *", flow="report", input="minutely", name="minutely", timezone="Asia/Kolkata")
