"""``loom schedules``: every schedule with its next fire time; ``--fire`` runs one pass now
(what ``loom serve`` does every few seconds, and Cloud Scheduler every minute). Its
subcommands change schedules at run time (:mod:`loom.primitives.schedule_admin`)::

    loom schedules create nightly "0 2 * * *" --flow report.build --input '{"kind": "n"}'
    loom schedules update nightly --cron "0 3 * * *"
    loom schedules pause nightly --note "quarter close"
    loom schedules unpause nightly
    loom schedules trigger nightly
    loom schedules backfill nightly --start 2026-01-01T00:00:00Z --end 2026-01-08T00:00:00Z
    loom schedules show nightly
    loom schedules delete nightly

Changes are recorded with the local user as who made them (``local:<user>``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, cast

import click

from loom.cli.authority import local_principal
from loom.cli.base import Embedded, Settings, with_env


@click.group(invoke_without_command=True)
@click.option("--fire", is_flag=True, help="Start the ticks due now (idempotent), then list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def schedules(ctx: click.Context, fire: bool, as_json: bool) -> None:
    """List every schedule (declared and made at run time) with its next fire time."""
    if ctx.invoked_subcommand is not None:
        return
    from loom.primitives.schedules import fire_due

    async def body(env: Embedded) -> dict[str, Any]:
        fired = [f.to_json() for f in await fire_due(env.runtime)] if fire else []
        return {"schedules": await env.runtime.schedules.list(), "fired": fired}

    done = with_env(ctx.obj, body)
    if as_json:
        click.echo(json.dumps(done))
        return
    for f in done["fired"]:
        what = "started" if f["started"] else f["status"]
        click.echo(f"fired {f['schedule']} {f['tick']}: {f['execution_id']} {what}")
    for s in done["schedules"]:
        click.echo(_line(s))
    click.echo(f"{len(done['schedules'])} schedule(s)")


def _line(s: dict[str, Any]) -> str:
    state = "paused" if s["paused"] else f"next {s['next_fire']}"
    where = "" if s["declared"] else "  (run time)"
    return f"{s['name']}  {s['cron']} ({s['timezone']})  flow {s['flow']}  {state}{where}"


def _moment(text: str | None) -> float | None:
    """Epoch seconds or an ISO-8601 time (UTC unless it says)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is no time (epoch seconds or ISO 8601)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _input(text: str | None) -> Any:
    try:
        return None if text is None else json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"--input is not JSON: {exc}") from None


def _show(settings: Settings, call: Callable[[Embedded], Awaitable[Any]], as_json: bool) -> None:
    done: Any = with_env(settings, call)
    if as_json:
        click.echo(json.dumps(done))
    elif isinstance(done, str):
        click.echo(done)
    elif isinstance(done, list):
        fired = cast("list[dict[str, Any]]", done)
        for f in fired:
            what = "started" if f["started"] else f["status"]
            click.echo(f"{f['tick']}  {f['execution_id']}  {what}")
        click.echo(f"{len(fired)} tick(s)")
    else:
        click.echo(_line(done))


_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_NOTE = click.option("--note", default="", help="Why (kept with the schedule).")


@schedules.command()
@click.argument("name")
@click.argument("cron")
@click.option("--flow", required=True, help="The flow each tick starts.")
@click.option("--input", "input_json", default=None, help="The flow's input, as JSON.")
@click.option("--timezone", default="UTC", show_default=True, help="An IANA time zone.")
@click.option("--catch-up", default=0, show_default=True, help="Missed ticks run after downtime.")
@click.option("--start-at", default=None, help="Ticks from this time are due (default: from now).")
@click.option("--end-at", default=None, help="No tick after this time.")
@click.option("--paused", is_flag=True, help="Create it paused.")
@_NOTE
@_JSON
@click.pass_obj
def create(
    settings: Settings,
    name: str,
    cron: str,
    flow: str,
    input_json: str | None,
    timezone: str,
    catch_up: int,
    start_at: str | None,
    end_at: str | None,
    paused: bool,
    note: str,
    as_json: bool,
) -> None:
    """Make a schedule at run time; its first tick is the first after now."""
    value = _input(input_json)
    first, last = _moment(start_at), _moment(end_at)

    async def body(env: Embedded) -> dict[str, Any]:
        return await env.runtime.schedules.create(
            name, cron, flow=flow, input=value, timezone=timezone, catch_up=catch_up,
            start_at=first, end_at=last, paused=paused, note=note, by=local_principal(),
        )  # fmt: skip

    _show(settings, body, as_json)


@schedules.command()
@click.argument("name")
@click.option("--cron", default=None)
@click.option("--flow", default=None)
@click.option("--input", "input_json", default=None, help="As JSON ('null' clears it).")
@click.option("--timezone", default=None)
@click.option("--catch-up", type=int, default=None)
@click.option("--start-at", default=None)
@click.option("--end-at", default=None)
@click.option("--note", default=None)
@_JSON
@click.pass_obj
def update(
    settings: Settings, name: str, as_json: bool, input_json: str | None, **given: Any
) -> None:
    """Change the fields given of a schedule made at run time."""
    changes = {k: v for k, v in given.items() if v is not None}
    for key in ("start_at", "end_at"):
        if key in changes:
            changes[key] = _moment(changes[key])
    if input_json is not None:
        changes["input"] = _input(input_json)
    if not changes:
        raise click.UsageError("name at least one field to change")

    async def body(env: Embedded) -> dict[str, Any]:
        return await env.runtime.schedules.update(name, by=local_principal(), **changes)

    _show(settings, body, as_json)


@schedules.command()
@click.argument("name")
@_NOTE
@_JSON
@click.pass_obj
def pause(settings: Settings, name: str, note: str, as_json: bool) -> None:
    """Start no tick of NAME until it is unpaused."""
    _show(settings, lambda env: env.runtime.schedules.pause(name, note, local_principal()), as_json)


@schedules.command()
@click.argument("name")
@_NOTE
@_JSON
@click.pass_obj
def unpause(settings: Settings, name: str, note: str, as_json: bool) -> None:
    """Fire NAME's ticks again, from the next one."""
    _show(
        settings, lambda env: env.runtime.schedules.unpause(name, note, local_principal()), as_json
    )


@schedules.command()
@click.argument("name")
@_JSON
@click.pass_obj
def trigger(settings: Settings, name: str, as_json: bool) -> None:
    """Start one execution of NAME now, paused or not."""

    async def body(env: Embedded) -> list[dict[str, Any]]:
        return [(await env.runtime.schedules.trigger(name)).to_json()]

    _show(settings, body, as_json)


@schedules.command()
@click.argument("name")
@click.option("--start", required=True, help="From this time (epoch seconds or ISO 8601).")
@click.option("--end", required=True, help="Up to this time, not included.")
@_JSON
@click.pass_obj
def backfill(settings: Settings, name: str, start: str, end: str, as_json: bool) -> None:
    """Start every tick of NAME in [START, END), each once."""
    first, last = _moment(start), _moment(end)
    assert first is not None and last is not None

    async def body(env: Embedded) -> list[dict[str, Any]]:
        return [f.to_json() for f in await env.runtime.schedules.backfill(name, first, last)]

    _show(settings, body, as_json)


@schedules.command()
@click.argument("name")
@_JSON
@click.pass_obj
def show(settings: Settings, name: str, as_json: bool) -> None:
    """One schedule."""
    _show(settings, lambda env: env.runtime.schedules.get(name), as_json)


@schedules.command()
@click.argument("name")
@click.pass_obj
def delete(settings: Settings, name: str) -> None:
    """Delete a schedule made at run time (its executions stay)."""

    async def body(env: Embedded) -> str:
        await env.runtime.schedules.delete(name)
        return f"deleted schedule {name}"

    _show(settings, body, False)
