"""``loom purge``: delete finished executions older than a retention period (embedded store).

Registered on the ``loom`` group by :mod:`loom.cli`; it shares the group's ``--store``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from loom.ops.retention import DEFAULT_RETENTION, PurgeSummary, parse_age, purge_finished


@click.command()
@click.option(
    "--older-than",
    default=DEFAULT_RETENTION,
    show_default=True,
    help="Delete executions that finished longer ago than this (e.g. 30d, 12h, 90m).",
)
@click.option("--batch", default=500, show_default=True, help="Executions read per batch.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def purge(settings: Any, older_than: str, batch: int, as_json: bool) -> None:
    """Delete finished executions (events, snapshots, blobs) older than --older-than.

    Running, waiting and in-doubt executions are never deleted; a purged id can be started
    again as a new execution. Safe to interrupt and to run again.
    """
    from loom.cli.base import Embedded, run_async

    async def go() -> PurgeSummary:
        seconds = parse_age(older_than)
        async with Embedded(settings, need_app=False) as env:
            return await purge_finished(
                env.store, env.runtime.payloads.blobs, older_than=seconds, batch=batch
            )

    summary = run_async(go())
    if as_json:
        click.echo(json.dumps(summary.to_json()))
    else:
        click.echo(f"purged {summary.purged} execution(s) and {summary.blobs} blob(s)")
