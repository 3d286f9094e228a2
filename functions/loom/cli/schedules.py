"""``loom schedules``: the app's schedules with their next fire time; ``--fire`` runs one
pass now (what ``loom serve`` does every few seconds, and Cloud Scheduler every minute)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from loom.cli.base import Embedded, Settings, with_env


@click.command()
@click.option("--fire", is_flag=True, help="Start the ticks due now (idempotent), then list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def schedules(settings: Settings, fire: bool, as_json: bool) -> None:
    """List the app's schedules with their next fire time."""
    from loom.primitives.schedules import declared, fire_due
    from loom.workers.schedule_routes import describe

    async def body(env: Embedded) -> dict[str, Any]:
        fired = [f.to_json() for f in await fire_due(env.runtime)] if fire else []
        now = datetime.fromtimestamp(env.runtime.clock(), UTC)
        listed = [describe(s, now) for s in declared(env.runtime.app).values()]
        return {"schedules": listed, "fired": fired}

    done = with_env(settings, body)
    if as_json:
        click.echo(json.dumps(done))
        return
    for f in done["fired"]:
        what = "started" if f["started"] else f["status"]
        click.echo(f"fired {f['schedule']} {f['tick']}: {f['execution_id']} {what}")
    for s in done["schedules"]:
        click.echo(
            f"{s['name']}  {s['cron']} ({s['timezone']})  flow {s['flow']}  next {s['next_fire']}"
        )
    click.echo(f"{len(done['schedules'])} schedule(s)")
