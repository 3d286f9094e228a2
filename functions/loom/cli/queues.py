"""``loom queues``: each declared queue's limits, executions in flight and waiting."""

from __future__ import annotations

import json
from typing import Any

import click

from loom.cli.base import Embedded, Settings, with_env


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def queues(settings: Settings, as_json: bool) -> None:
    """List the app's queues with their in-flight and waiting counts."""
    from loom.workers.queue_routes import describe_queues

    async def body(env: Embedded) -> list[dict[str, Any]]:
        return await describe_queues(env.runtime)

    listed = with_env(settings, body)
    if as_json:
        click.echo(json.dumps({"queues": listed}))
        return
    for q in listed:
        click.echo(
            f"{q['name']}  concurrency {q['concurrency'] or '-'}  rate/s {q['rate_per_second'] or '-'}"
            f"  in flight {q['in_flight']}  waiting {q['waiting']}"
        )
    click.echo(f"{len(listed)} queue(s)")
