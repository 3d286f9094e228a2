"""``loom send`` and ``loom get-event``: messages in, published state out."""

from __future__ import annotations

from typing import Any

import click

from loom.cli.authority import local_principal
from loom.cli.base import Embedded, Settings
from loom.cli.base import json_arg as json_arg
from loom.cli.base import print_result as print_result
from loom.cli.base import settle as settle
from loom.cli.base import with_env as with_env
from loom.cli.types import EXECUTION_ID


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.argument("topic")
@click.argument("payload", default="null")
@click.option(
    "--id",
    "message_id",
    default=None,
    help="Message id: a repeat with the same topic and payload is a no-op; another "
    "payload under a used id is refused.",
)
@click.option("--wait", default=0.0, help="Also wait this many seconds for timers due.")
@click.pass_obj
def send(
    settings: Settings,
    execution_id: str,
    topic: str,
    payload: str,
    message_id: str | None,
    wait: float,
) -> None:
    """Send PAYLOAD (JSON) to EXECUTION_ID's mailbox on TOPIC, and run it until it blocks."""
    value = json_arg(payload, "PAYLOAD")

    async def body(env: Embedded) -> Any:
        await env.runtime.send(
            execution_id, topic, value, message_id=message_id, by=local_principal()
        )
        return await settle(env, execution_id, wait)

    print_result(with_env(settings, body))


@click.command(name="get-event")
@click.argument("execution_id", type=EXECUTION_ID)
@click.argument("key")
@click.option("--timeout", default=0.0, help="Wait up to this many seconds (at most 60).")
@click.pass_obj
def get_event(settings: Settings, execution_id: str, key: str, timeout: float) -> None:
    """Print the value EXECUTION_ID published under KEY (as JSON)."""
    import json

    async def body(env: Embedded) -> Any:
        return await env.runtime.get_event(execution_id, key, timeout)

    click.echo(json.dumps(with_env(settings, body, need_app=False), ensure_ascii=False))
