"""``loom ls``: executions newest first, filtered by status and flow, at most ``--limit``.

The listing reads the store's indexed, paged ``browse`` (never the whole table) and says
when it stopped at the limit. Names are never broken mid-word: when the longest id and flow
fit beside the other columns the rows form a table; otherwise each execution takes a line
of its own with its facts indented below it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from loom.cli.base import Embedded, Settings, with_env
from loom.store.base import STATUSES, ExecutionSummary
from loom.store.browse import MAX_BROWSE_LIMIT, BrowseQuery
from loom.wire import ExecutionResult

console = Console(highlight=False)
_FIXED = 9 + 6 + 19 + 16 + 5  # status, events, updated, the detail's least, the gaps


def _when(at: float | None) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S") if at else "-"


async def listing(
    env: Embedded, status: str | None, flow: str | None, limit: int
) -> tuple[list[ExecutionSummary], bool]:
    """The newest ``limit`` rows that match, and whether more match beyond them."""
    rows: list[ExecutionSummary] = []
    after = None
    while len(rows) <= limit:
        want = min(limit + 1 - len(rows), MAX_BROWSE_LIMIT)
        page = await env.runtime.store.browse(
            BrowseQuery(status=status, flow=flow, limit=want, after=after)
        )
        rows.extend(page)
        if len(page) < want:
            break
        after = page[-1].cursor
    return rows[:limit], len(rows) > limit


def _details(rows: Sequence[ExecutionSummary], doubts: dict[str, ExecutionResult]) -> list[str]:
    lines: list[str] = []
    for row in rows:
        result = doubts.get(row.execution_id)
        for d in result.in_doubt if result else []:
            lines.append(
                f"  {row.execution_id}  step {d.step_id}  {d.effect}  "
                f"key={d.idempotency_key}  started {_when(d.started_at)}  episode {d.episode}"
            )
    return lines


def _detail(row: ExecutionSummary, doubts: dict[str, ExecutionResult]) -> str:
    if row.parked_reason:
        return row.parked_reason
    return "see below" if row.execution_id in doubts and doubts[row.execution_id].in_doubt else ""


def render(rows: Sequence[ExecutionSummary], doubts: dict[str, ExecutionResult]) -> None:
    """Print the rows as a table, or one execution per paragraph when names are too long
    to sit in a table of the terminal's width unbroken."""
    widest = max((len(r.execution_id) + len(r.flow) for r in rows), default=0)
    if widest + _FIXED <= console.width:
        table = Table(box=None, pad_edge=False)
        for col in ("execution", "flow", "status", "events", "updated (UTC)"):
            table.add_column(col, no_wrap=True)
        table.add_column("detail", overflow="fold", min_width=16)
        for row in rows:
            table.add_row(
                row.execution_id,
                row.flow,
                row.status,
                str(row.last_seq),
                _when(row.updated_at),
                _detail(row, doubts),
            )
        console.print(table)
    else:
        for row in rows:
            console.print(row.execution_id, soft_wrap=True)
            facts = f"  {row.flow}  {row.status}  {row.last_seq} events  updated {_when(row.updated_at)} UTC"
            console.print(facts, soft_wrap=True)
            if detail := _detail(row, doubts):
                console.print(f"  {detail}")
    lines = _details(rows, doubts)
    if lines:
        console.print(
            "in doubt (give a verdict: loom verdict ID STEP performed|not_performed|failed):"
        )
        for line in lines:
            console.print(line, soft_wrap=True)


def to_json(rows: Sequence[ExecutionSummary], doubts: dict[str, ExecutionResult]) -> list[Any]:
    """``loom ls --json``: one object per execution (in-doubt steps included)."""
    from loom.cli.hints import list_json

    return list_json(rows, doubts)


@click.command(name="ls")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only this status.")
@click.option("--flow", default=None, help="Only executions of this flow.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Show at most this many, newest first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array instead of a table.")
@click.pass_obj
def list_executions(
    settings: Settings, status: str | None, flow: str | None, limit: int, as_json: bool
) -> None:
    """List executions, newest first (in-doubt ones with their steps and keys)."""

    async def body(env: Embedded) -> tuple[list[ExecutionSummary], bool, Any]:
        rows, more = await listing(env, status, flow, limit)
        doubts = {
            r.execution_id: await env.runtime.result(r.execution_id)
            for r in rows
            if r.status == "in_doubt"
        }
        return rows, more, doubts

    rows, more, doubts = with_env(settings, body, need_app=False)
    if as_json:
        click.echo(json.dumps(to_json(rows, doubts), indent=2))
        if more:
            click.echo(f"stopped at --limit {limit}: more executions match", err=True)
        return
    render(rows, doubts)
    if more:
        console.print(
            f"{len(rows)} execution(s) shown, the newest; more match: raise --limit "
            f"(now {limit}) or narrow with --status / --flow"
        )
    else:
        console.print(f"{len(rows)} execution(s)")
