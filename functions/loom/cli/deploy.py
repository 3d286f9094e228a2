"""Deploy-time commands: ``loom versions`` and ``loom replay-check``.

Registered on the ``loom`` group by :mod:`loom.cli`; both only read the store.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from loom.config import load_app, open_blob_store, open_store
from loom.errors import InputError, LoomError

if TYPE_CHECKING:  # imported when a command runs: ``loom --help`` stays fast
    from loom.ops.replay_check import Checked
    from loom.ops.versions import VersionRow

T = TypeVar("T")


def _go(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; a Loom error becomes one line and exit 2 (bad input) or 1."""

    async def body() -> T:
        return await make()

    try:
        return asyncio.run(body())
    except InputError as exc:
        click.secho(f"error: {exc.message}", fg="red", err=True)
        sys.exit(2)
    except LoomError as exc:
        click.secho(f"error: {exc.code}: {exc.message}", fg="red", err=True)
        sys.exit(1)


def _versions_text(rows: list[VersionRow]) -> None:
    click.echo(f"{'FLOW':<32} {'VERSION':<10} {'LIVE':>7}  CODE")
    for r in rows:
        code = "-" if r.registered is None else "registered" if r.registered else "MISSING"
        if r.latest:
            code += " (latest: new executions start here)"
        elif r.registered and r.live == 0:
            code += " (no live executions: safe to delete)"
        click.echo(f"{r.flow:<32} {r.version:<10} {r.live:>7}  {code}")


@click.command(name="versions")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def versions(settings: Any, as_json: bool) -> None:
    """Live executions per flow version, and which versions the code registers.

    A version with no live executions can be deleted from the code; a MISSING one still
    has live executions that no worker of this code can run.
    """

    from loom.ops.versions import live_counts, version_table

    async def body() -> list[VersionRow]:
        app = load_app(settings.app) if settings.app else None
        store = open_store(settings.store)
        try:
            return version_table(await live_counts(store), app)
        finally:
            await store.aclose()

    rows = _go(body)
    if as_json:
        click.echo(json.dumps({"versions": [r.to_json() for r in rows]}, indent=2))
    else:
        _versions_text(rows)


class _Tally:
    """Prints verdicts as they come, and progress on a terminal."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.checked = self.diverged = self.continues = 0
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()
        self.shown = float("-inf")  # the first verdict shows at once

    def __call__(self, item: Checked) -> None:
        self.checked += 1
        if item.divergence is not None:
            self.diverged += 1
            self._emit(
                "divergence", item.divergence.to_json(), f"DIVERGES  {item.divergence.line()}"
            )
        elif item.parked:
            self.continues += 1
            eid = item.summary.execution_id
            self._emit(
                "would_continue",
                {"execution_id": eid, "parked_reason": item.summary.parked_reason},
                f"CONTINUES {eid}  parked ({item.summary.parked_reason}); "
                f"replays cleanly now: loom retry {eid}",
            )
        self._progress()

    def _emit(self, kind: str, data: dict[str, Any], text: str) -> None:
        self._clear()
        click.echo(json.dumps({"kind": kind, **data}) if self.as_json else text)

    def _progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty and (force or now - self.shown > 0.2):
            self.shown = now
            rate = self.checked / max(now - self.started, 1e-9)
            sys.stderr.write(f"\rchecked {self.checked}  diverging {self.diverged}  ({rate:.0f}/s)")
            sys.stderr.flush()

    def _clear(self) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K")

    def finish(self) -> None:
        self._clear()
        summary = {
            "checked": self.checked,
            "diverged": self.diverged,
            "would_continue": self.continues,
            "seconds": round(time.monotonic() - self.started, 3),
        }
        if self.as_json:
            click.echo(json.dumps({"kind": "summary", **summary}))
        else:
            click.echo(
                f"checked {self.checked} executions in {summary['seconds']} s: "
                f"{self.diverged} would diverge, {self.continues} parked would continue"
            )


@click.command(name="replay-check")
@click.option(
    "--sample",
    default=100,
    show_default=True,
    help="Also check this many newest completed and newest failed executions.",
)
@click.option("--concurrency", default=16, show_default=True, help="Executions per bulk read.")
@click.option("--page", default=500, show_default=True, help="Summaries read per store page.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def replay_check(settings: Any, sample: int, concurrency: int, page: int, as_json: bool) -> None:
    """Replay every live execution (and a sample of finished ones) against the code.

    Nothing is invoked and nothing is written. Exits 1 when any execution would diverge,
    naming it, its flow and version, the step, and what history and code each say.
    """
    for name, value in (("--concurrency", concurrency), ("--page", page)):
        if value < 1:
            raise click.BadParameter(f"must be at least 1, got {value}", param_hint=name)
    from loom.ops.replay_check import ReplayChecker

    tally = _Tally(as_json)

    async def body() -> None:
        app = load_app(settings.app)
        store = open_store(settings.store)
        checker = ReplayChecker(
            app,
            store,
            blobs=open_blob_store(store_url=settings.store),
            sample=max(sample, 0),
            page=page,
            concurrency=concurrency,
        )
        try:
            await checker.run(tally)
        finally:
            await store.aclose()

    _go(body)
    tally.finish()
    sys.exit(1 if tally.diverged else 0)


def register(group: click.Group) -> None:
    """Add the deploy commands to the ``loom`` group."""
    group.add_command(versions)
    group.add_command(replay_check)
