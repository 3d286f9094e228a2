"""A parent fanning out to child flows: one report per region, each its own execution.

``report.all`` starts a ``report.region`` child per region, then gathers them. Each child
has its own log, retries and crash recovery; its id comes from the parent's (``r-1.child.1``,
``r-1.child.2``…), so a crash or a replay never starts a region twice. When a child ends,
its worker resumes the parent through the normal dispatch path::

    LOOM_APP=examples.fanout:app loom start report.all --input '["emea", "apac"]' --id r-1 --wait 5
    LOOM_APP=examples.fanout:app loom show r-1.child.1
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom

app = Loom("reports")


class RegionReport(BaseModel):
    """One region's figures."""

    region: str
    total: int


class Summary(BaseModel):
    """Every region, and the sum."""

    regions: list[RegionReport]
    grand_total: int


@app.effect("sales.total")
def sales_total(ctx: EffectContext, region: str) -> int:
    return sum(map(ord, region)) * 10  # stands in for a query against a warehouse


@app.flow("report.region")
async def region_report(ctx: FlowContext, region: str) -> RegionReport:
    return RegionReport(region=region, total=await ctx.execute(sales_total, region))


@app.flow("report.all")
async def all_regions(ctx: FlowContext, regions: list[str]) -> Summary:
    children = [await ctx.start_flow(region_report, region) for region in regions]
    reports: list[RegionReport] = list(await asyncio.gather(*(c.result() for c in children)))
    return Summary(regions=reports, grand_total=sum(r.total for r in reports))
