"""``loom stream ID KEY``: print a flow's stream, a JSON value a line.

Without ``--follow`` it prints the values written so far (from ``--offset``) and exits; with
``--follow`` it goes on printing them as the flow writes them until the stream is closed or
the execution ends. See :mod:`loom.primitives.streams`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from loom.cli.base import Embedded, Settings, with_env
from loom.cli.types import EXECUTION_ID
from loom.primitives.streams import MAX_LIMIT


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.argument("key")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="The first value's offset.")
@click.option("--follow", is_flag=True, help="Wait for more until the stream is over.")
@click.pass_obj
def stream(settings: Settings, execution_id: str, key: str, offset: int, follow: bool) -> None:
    """Print the values of EXECUTION_ID's stream KEY from --offset on, one JSON a line."""

    async def body(env: Embedded) -> Any:
        at = offset
        if follow:
            async for value in env.runtime.stream(execution_id, key, at):
                click.echo(json.dumps(value, ensure_ascii=False))
            return
        while True:
            chunk = await env.runtime.read_stream(execution_id, key, at, limit=MAX_LIMIT)
            for value in chunk.values:
                click.echo(json.dumps(value, ensure_ascii=False))
            if len(chunk.values) < MAX_LIMIT:
                return
            at = chunk.next_offset

    with_env(settings, body, need_app=False)
