"""``loom fork ID --from-step N``: a new execution from an execution's recorded prefix."""

from __future__ import annotations

from typing import Any

import click

from loom.cli.authority import local_principal
from loom.cli.base import Embedded, Settings, print_result, settle, with_env
from loom.cli.types import EXECUTION_ID


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.option("--from-step", "from_step", required=True, help="Step id to run again from.")
@click.option(
    "--id", "new_id", type=EXECUTION_ID, default=None, help="The fork's id (default: new)."
)
@click.option("--version", default=None, help="Flow version to run (default: the latest).")
@click.option("--wait", default=0.0, help="Also wait this many seconds for timers due.")
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    help="Add a capability to the fork's (if policy lets you); repeat it for several.",
)
@click.pass_obj
def fork(
    settings: Settings,
    execution_id: str,
    from_step: str,
    new_id: str | None,
    version: str | None,
    wait: float,
    capabilities: tuple[str, ...],
) -> None:
    """Start a new execution that reuses EXECUTION_ID's steps before --from-step and runs
    the rest on the current code (the original is untouched)."""

    async def body(env: Embedded) -> Any:
        result = await env.runtime.fork(
            execution_id,
            from_step,
            new_id=new_id,
            by=local_principal(),
            version=version,
            capabilities=capabilities,
        )
        return await settle(env, result.execution_id, wait)

    print_result(with_env(settings, body))
