"""``loom retry ID``: run a parked execution again, or re-drive a failed one as a fork;
``loom retry --status …``: in bulk.

The bulk form selects dead letters (``loom.ops.deadletters``): ``--status poison|parked|failed``,
narrowed by ``--flow`` and ``--since``, re-drives of failed executions left out (a second
bulk retry starts nothing new), and re-drives them, or with ``--dry-run`` only lists what it
would do.
"""

from __future__ import annotations

import json
import sys

import click

from loom.cli.authority import local_principal
from loom.cli.base import Embedded, Settings, print_result, with_env
from loom.grants import recorded_by
from loom.ids import check_execution_id
from loom.ops.deadletters import (
    KINDS,
    Redrive,
    check_kind,
    find,
    parse_since,
    redrive,
    redrive_by_id,
)
from loom.wire import ExecutionResult


@click.command()
@click.argument("execution_id", required=False)
@click.option(
    "--by", default=None, help="A note recorded beside you (local:<user>); grants nothing."
)
@click.option("--status", type=click.Choice(KINDS), default=None, help="Re-drive in bulk.")
@click.option("--flow", default=None, help="Bulk: only executions of this flow.")
@click.option("--since", default=None, help="Bulk: changed since an age (2h, 7d) or ISO time.")
@click.option("--limit", default=1000, show_default=True, help="Bulk: at most this many.")
@click.option("--dry-run", is_flag=True, help="Bulk: list what would be done; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Bulk: print JSON lines.")
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    help="One failed execution: add a capability to its re-drive (if policy lets you).",
)
@click.pass_obj
def retry(
    settings: Settings,
    execution_id: str | None,
    by: str | None,
    status: str | None,
    flow: str | None,
    since: str | None,
    limit: int,
    dry_run: bool,
    as_json: bool,
    capabilities: tuple[str, ...],
) -> None:
    """Run a parked execution again (after a poison park, or fixed code for a divergence), or
    re-run a failed one as a fork; with --status, every dead letter of that kind (failed ones
    are re-run as forks; re-drives that failed again are not selected)."""
    if (execution_id is None) == (status is None):
        raise click.UsageError("give an EXECUTION_ID, or --status for a bulk re-drive")
    if status is None and (flow or since or dry_run or as_json):
        raise click.UsageError("--flow, --since, --dry-run and --json go with --status")
    if status is not None and capabilities:
        raise click.UsageError("--capability goes with one EXECUTION_ID, not --status")
    if status is None:
        done = with_env(settings, lambda env: _one(env, execution_id or "", by, capabilities))
        if isinstance(done, Redrive):
            _render([done], False, False)
            if done.error:
                sys.exit(1)
        else:
            print_result(done)
        return
    kind = check_kind(status)

    async def body(env: Embedded) -> list[Redrive]:
        after = parse_since(since, env.runtime.clock()) if since else None
        letters = await find(env.runtime, kind, flow=flow, since=after, limit=limit, bulk=True)
        return await redrive(env.runtime, letters, by=local_principal(), note=by, dry_run=dry_run)

    _render(with_env(settings, body), dry_run, as_json)


async def _one(
    env: Embedded, execution_id: str, note: str | None, capabilities: tuple[str, ...]
) -> Redrive | ExecutionResult:
    """A failed execution is re-driven as a fork (a failed re-drive too); else retried.
    Authority is the local user's (``local:<user>``); ``note`` is recorded beside it."""
    row = await env.runtime.store.summary(check_execution_id(execution_id))
    who = local_principal()
    if row.status == "failed" or capabilities:  # (refused for a parked one, saying why)
        return await redrive_by_id(
            env.runtime, execution_id, by=who, note=note, capabilities=capabilities
        )
    return await env.runtime.retry(execution_id, by=recorded_by(who, note) or who)


def _render(done: list[Redrive], dry_run: bool, as_json: bool) -> None:
    for item in done:
        if as_json:
            click.echo(json.dumps(item.to_json()))
            continue
        line = f"{item.execution_id}  {item.flow}  {_what(item, dry_run)}"
        click.echo(line + (f"  ({item.reason})" if item.reason else ""))
    if not as_json:
        verb = "would re-drive" if dry_run else "re-drove"
        failed = sum(1 for item in done if item.error)
        click.echo(f"{verb} {len(done) - failed} of {len(done)} execution(s)")


def _what(item: Redrive, dry_run: bool) -> str:
    if item.error:
        return f"error: {item.error}"
    if item.action == "none":
        return f"already re-driven as {item.new_execution_id} ({item.status})"
    target = f" as {item.new_execution_id}" if item.new_execution_id else ""
    if dry_run:
        return f"would {item.action}{target}"
    return f"{item.action}{target}: {item.status}"
