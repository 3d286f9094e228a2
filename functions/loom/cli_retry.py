"""``loom retry ID``: run a parked execution (poison or nondeterminism) again."""

from __future__ import annotations

from typing import Any

import click

from loom.cli import Embedded, Settings, _print_result, _with  # pyright: ignore[reportPrivateUsage]


@click.command()
@click.argument("execution_id")
@click.option("--by", default="cli", help="Who lets it run again (recorded).")
@click.pass_obj
def retry(settings: Settings, execution_id: str, by: str) -> None:
    """Run a parked execution again (after a poison park, or fixed code for a divergence)."""

    async def body(env: Embedded) -> Any:
        return await env.runtime.retry(execution_id, by=by)

    _print_result(_with(settings, body))
