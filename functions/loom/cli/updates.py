"""``loom update`` and ``loom query``: ask a running flow's handlers.

``loom update ID NAME [ARGS]`` sends an update and prints its handler's value as JSON (exit
1 if the handler raised or the execution ended first, 2 if it was refused); ``--no-wait``
prints where it stands once accepted. ``loom query ID NAME [ARGS]`` prints the value of a
query handler; nothing is written. See :mod:`loom.primitives.updates` and
:mod:`loom.primitives.queries`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from loom.cli.authority import local_principal
from loom.cli.base import Embedded, Settings, json_arg, with_env
from loom.cli.types import EXECUTION_ID


def _echo(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False))


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.argument("name")
@click.argument("args", default="null")
@click.option(
    "--id",
    "update_id",
    default=None,
    help="Update id: a repeat with the same name and arguments is the same update, "
    "answered the same; others under a used id are refused.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the handler's answer.",
)
@click.option("--no-wait", is_flag=True, help="Print where it stands once accepted.")
@click.pass_obj
def update(
    settings: Settings,
    execution_id: str,
    name: str,
    args: str,
    update_id: str | None,
    timeout: float,
    no_wait: bool,
) -> None:
    """Send update NAME with ARGS (JSON) to EXECUTION_ID's flow; print its handler's value."""
    value = json_arg(args, "ARGS")

    async def body(env: Embedded) -> Any:
        rt = env.runtime
        if no_wait:
            got = await rt.start_update(
                execution_id, name, value, update_id=update_id, by=local_principal()
            )
            return got.model_dump()
        return await rt.update(
            execution_id, name, value, update_id=update_id, by=local_principal(), timeout=timeout
        )

    _echo(with_env(settings, body, running=execution_id))


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.argument("name")
@click.argument("args", default="null")
@click.pass_obj
def query(settings: Settings, execution_id: str, name: str, args: str) -> None:
    """Print the value of EXECUTION_ID's query handler NAME called with ARGS (JSON)."""
    value = json_arg(args, "ARGS")

    async def body(env: Embedded) -> Any:
        return await env.runtime.query(execution_id, name, value)

    _echo(with_env(settings, body))
