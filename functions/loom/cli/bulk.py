"""``loom bulk cancel|resume|retry``: act on every execution a filter selects
(:mod:`loom.ops.bulk`).

The filter is the same for the three: ``--flow``, ``--status``, ``--from``/``--to`` (the
creation time: an age such as ``2h`` or an ISO-8601 time with its offset), ``--id`` (repeat
it), ``--limit``. ``--dry-run`` lists what would be done and writes nothing; the last line
counts what was (or would be) done. The command runs as the local operator
(``local:<user>``), recorded as who acted, with ``--by`` as a name beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from loom.cli.authority import local_principal
from loom.cli.base import Embedded, Settings, json_arg, with_env
from loom.cli.types import EXECUTION_ID
from loom.ops.bulk import BulkReport, Operation, Selection
from loom.ops.bulk_select import MAX_LIMIT
from loom.ops.deadletters import parse_since


def _selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--flow", default=None, help="Only executions of this flow."),
        click.option("--status", default=None, help="Only this status (see --help of each)."),
        click.option("--from", "created_from", default=None, help="Created since (2h, ISO)."),
        click.option("--to", "created_before", default=None, help="Created before (2h, ISO)."),
        click.option(
            "--id", "ids", multiple=True, type=EXECUTION_ID, help="Only this one (repeatable)."
        ),
        click.option(
            "--limit",
            default=100,
            show_default=True,
            type=click.IntRange(1, MAX_LIMIT),
            help="At most this many (newest first).",
        ),
        click.option("--dry-run", is_flag=True, help="List what would be done; write nothing."),
        click.option(
            "--by", default=None, help="A note recorded beside you (local:<user>); grants nothing."
        ),
        click.option("--json", "as_json", is_flag=True, help="Print the report as JSON."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.group()
def bulk() -> None:
    """Cancel, resume or retry every execution a filter selects (--dry-run first)."""


@bulk.command("cancel")
@_selection_options
@click.option("--reason", default="", help="Why (recorded; the flows see it).")
@click.pass_obj
def cancel(settings: Settings, reason: str, **selected: Any) -> None:
    """Cancel the executions selected (running, suspended, in_doubt, parked, poison):
    each one's flow cleans up, as with loom cancel."""
    _run(settings, "cancel", selected, reason=reason or "bulk cancel")


@bulk.command("resume")
@_selection_options
@click.option("--on", required=True, help="The gate to resume.")
@click.option(
    "--key", default=None, help="Its correlation key ({execution_id} stands for each id)."
)
@click.option("--payload", default=None, help="JSON payload.")
@click.pass_obj
def resume(
    settings: Settings, on: str, key: str | None, payload: str | None, **selected: Any
) -> None:
    """Resume a gate of the executions selected (suspended, running): each one's open gate
    ON (its one open gate on ON, or the one keyed --key)."""
    value = json_arg(payload, "--payload")
    _run(settings, "resume", selected, on=on, correlation_key=key, payload=value)


@bulk.command("retry")
@_selection_options
@click.pass_obj
def retry(settings: Settings, **selected: Any) -> None:
    """Retry the dead letters selected (failed, parked, poison): a parked one runs again,
    a failed one is re-driven as a fork from its failure, as with loom retry."""
    _run(settings, "retry", selected)


def _run(settings: Settings, operation: Operation, selected: dict[str, Any], **action: Any) -> None:
    dry_run, as_json, note = selected.pop("dry_run"), selected.pop("as_json"), selected.pop("by")

    async def body(env: Embedded) -> BulkReport:
        selection = _selection(selected, env.runtime.clock())
        return await env.runtime.bulk(
            operation, selection, by=local_principal(), note=note, dry_run=dry_run, **action
        )

    report = with_env(settings, body)
    if as_json:
        click.echo(json.dumps(report.to_json()))
        return
    for item in report.items:
        click.echo(f"{item.execution_id}  {item.flow}  {item.status}  {_what(item, dry_run)}")
    verb = "would" if dry_run else "did"
    more = " (more matched: run it again or raise --limit)" if report.more else ""
    click.echo(f"{verb} {operation} {report.count} of {len(report.items)} execution(s){more}")


def _selection(selected: dict[str, Any], now: float) -> Selection:
    def when(text: str | None) -> float | None:
        return parse_since(text, now) if text else None

    ids: tuple[str, ...] = selected["ids"]
    return Selection(
        flow=selected["flow"],
        status=selected["status"],
        created_from=when(selected["created_from"]),
        created_before=when(selected["created_before"]),
        execution_ids=list(ids) if ids else None,
        limit=selected["limit"],
    )


def _what(item: Any, dry_run: bool) -> str:
    if item.error:
        return f"error: {item.error}"
    if item.action == "skip":
        return f"skipped: {item.detail}"
    if item.action == "none":
        return f"done already ({item.outcome or item.detail})"
    target = f" {item.detail}" if item.detail else ""
    return f"would {item.action}{target}" if dry_run else f"{item.action}{target}: {item.outcome}"
