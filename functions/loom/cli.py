"""``loom``: the command line. Embedded by default (``sqlite:///.loom/loom.db``).

A command that appends an event runs the execution in this process until it blocks.
Errors are one line naming what was wrong, and a non-zero exit: 2 for bad input or
configuration, 75 (``EX_TEMPFAIL``) when the store failed and the same command may succeed
later, 1 otherwise (and when the execution a command ran has failed; see ``loom.cli_hints``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from loom.cli_authority import apply_env_grants, local_principal, open_episode
from loom.cli_deploy import register as register_deploy_commands
from loom.cli_hints import exit_for, interrupted, resume_checked
from loom.cli_types import EXECUTION_ID
from loom.config import DEFAULT_STORE, load_app, open_blob_store, open_store
from loom.errors import ConfigurationError, InputError, LoomError, StoreError, StoreLimitError
from loom.grants import recorded_by
from loom.queues import queue_ref
from loom.store.base import STATUSES

T = TypeVar("T")
EX_TEMPFAIL = 75


@dataclass
class Settings:
    """Options shared by every command."""

    app: str | None
    store: str


def _fail(message: str, code: int) -> None:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(code)


def _run(coro: Awaitable[T]) -> T:
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except (InputError, StoreLimitError) as exc:  # a retry fails the same way
        _fail(exc.message, 2)
    except ConfigurationError as exc:  # a setting to fix, like bad input: exit 2
        _fail(f"{exc.code}: {exc.message}", 2)
    except StoreError as exc:
        _fail(
            f"{exc.code}: {exc.message} (retry later: the log keeps what was recorded)", EX_TEMPFAIL
        )
    except LoomError as exc:
        _fail(f"{exc.code}: {exc.message}", 1)
    raise AssertionError("unreachable")


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{what} is not valid JSON: {exc.msg} at char {exc.pos}") from None


class Embedded:
    """A runtime with an in-process dispatcher over the configured store."""

    def __init__(self, settings: Settings, *, need_app: bool = True) -> None:
        from loom.dispatch.inprocess import InProcessDispatcher
        from loom.runtime import Runtime
        from loom.workers.local import LocalWorkerRuntime

        self.store = open_store(settings.store)
        app = load_app(settings.app) if need_app else _empty_app()
        self.runtime = Runtime(app, self.store, blobs=open_blob_store(store_url=settings.store))
        apply_env_grants(self.runtime)
        self.dispatcher = InProcessDispatcher(LocalWorkerRuntime(self.runtime))
        self.runtime.dispatcher = self.dispatcher

    async def __aenter__(self) -> Embedded:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.dispatcher.aclose()
        await self.store.aclose()


def _empty_app() -> Any:
    from loom.app import Loom

    return Loom("inspect")


def _with(
    settings: Settings,
    body: Callable[[Embedded], Awaitable[T]],
    need_app: bool = True,
    running: str | None = None,
) -> T:
    """Run ``body`` in an embedded runtime; ``running`` names the execution it runs."""
    claim_ttl: list[float] = []

    async def go() -> T:
        async with Embedded(settings, need_app=need_app) as env:
            claim_ttl.append(env.runtime.claim_ttl)
            return await body(env)

    try:
        return _run(go())
    except KeyboardInterrupt:
        interrupted(running, claim_ttl[0] if claim_ttl else 30.0)
        raise


@click.group()
@click.version_option(package_name="loom-cloudrun", prog_name="loom")
@click.option("--app", envvar="LOOM_APP", help="module:attr of your Loom app (or LOOM_APP).")
@click.option(
    "--store",
    envvar="LOOM_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    help="Event store URL (or LOOM_STORE).",
)
@click.pass_context
def main(ctx: click.Context, app: str | None, store: str) -> None:
    """Loom: durable execution for Python flows."""
    ctx.obj = Settings(app, store)


def _print_result(result: Any, check: bool = False) -> None:
    from loom.cli_render import render_result

    render_result(result)
    if check:
        exit_for(result)


@main.command()
@click.argument("flow")
@click.option("--input", "input_json", default="null", help="The flow input, as JSON.")
@click.option(
    "--id", "execution_id", type=EXECUTION_ID, default=None, help="Execution id (default: new)."
)
@click.option(
    "--capability",
    "capabilities",
    multiple=True,
    help="Grant a capability (if policy lets you); repeat it for several.",
)
@click.option("--wait", default=0.0, help="Also wait this many seconds for timers due.")
@click.option("--version", default=None, help="Flow version to start (default: the latest).")
@click.option("--queue", default=None, help="A declared queue to run on.")
@click.option("--partition-key", default=None, help="With --queue: run one per key at a time.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds (override).")
@click.option(
    "--limit",
    "limits",
    multiple=True,
    metavar="NAME=N",
    help="A limit or budget of the execution (max_events=…); repeat it for several.",
)
@click.pass_obj
def start(
    settings: Settings,
    flow: str,
    input_json: str,
    execution_id: str | None,
    capabilities: tuple[str, ...],
    wait: float,
    version: str | None,
    queue: str | None,
    partition_key: str | None,
    timeout: float | None,
    limits: tuple[str, ...],
) -> None:
    """Start FLOW (idempotent by --id) and run it until it blocks; exit 1 if it failed."""
    value = _json_arg(input_json, "--input")
    budgets = _limits_arg(limits)
    execution_id = execution_id or str(uuid.uuid4())  # known before it runs, for a Ctrl-C

    async def body(env: Embedded) -> Any:
        result = await env.runtime.start(
            flow,
            value,
            execution_id=execution_id,
            capabilities=set(capabilities),
            by=local_principal(),
            version=version,
            queue=queue_ref(queue, partition_key),
            timeout=timeout,
            budgets=budgets,
        )
        return await _settle(env, result.execution_id, wait)

    _print_result(_with(settings, body, running=execution_id), check=True)


def _limits_arg(pairs: tuple[str, ...]) -> dict[str, float] | None:
    """``--limit NAME=N`` options as a dict (checked by the start: loom.execution_limits)."""
    parsed: dict[str, float] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        try:
            parsed[name.strip()] = int(raw) if raw.strip().isdigit() else float(raw)
        except ValueError:
            raise click.BadParameter(f"--limit {pair!r}: expected NAME=NUMBER") from None
        if not sep:
            raise click.BadParameter(f"--limit {pair!r}: expected NAME=NUMBER")
    return parsed or None


async def _settle(env: Embedded, execution_id: str, wait: float) -> Any:
    if wait > 0:
        with contextlib.suppress(TimeoutError):
            await env.dispatcher.drain(timers_within=wait, timeout=wait + 5)
    return await env.runtime.result(execution_id)


@main.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.pass_obj
def execute(settings: Settings, execution_id: str) -> None:
    """One execute call on an existing execution (what a worker does); exit 1 if it failed."""
    from loom.wire import ExecutionPackage

    async def body(env: Embedded) -> Any:
        await env.runtime.require(execution_id)
        return await env.runtime.execute(ExecutionPackage(execution_id=execution_id))

    _print_result(_with(settings, body, running=execution_id), check=True)


@main.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.option("--on", required=True, help="What the gate waits on.")
@click.option("--key", required=True, help="The gate's correlation key.")
@click.option("--payload", default="null", help="The resume payload, as JSON.")
@click.option("--wait", default=0.0, help="Also wait this many seconds for timers due.")
@click.option("--strict", is_flag=True, help="Refuse (exit 2) when no open gate matches.")
@click.pass_obj
def resume(
    settings: Settings,
    execution_id: str,
    on: str,
    key: str,
    payload: str,
    wait: float,
    strict: bool,
) -> None:
    """Deliver a resume to a gate (buffered, with a warning, if no open gate matches)."""
    value = _json_arg(payload, "--payload")

    async def body(env: Embedded) -> Any:
        await resume_checked(env.runtime, execution_id, on, key, value, strict)
        return await _settle(env, execution_id, wait)

    _print_result(_with(settings, body, running=execution_id), check=True)


@main.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.argument("step_id")
@click.argument("verdict", type=click.Choice(["performed", "not_performed", "failed"]))
@click.option("--output", default=None, help="performed: the effect's output, as JSON.")
@click.option("--error", default=None, help="failed: the error message.")
@click.option(
    "--by", default=None, help="A note recorded beside you (local:<user>); grants nothing."
)
@click.option("--episode", type=int, default=None, help="The in-doubt episode (default: open).")
@click.pass_obj
def verdict(
    settings: Settings,
    execution_id: str,
    step_id: str,
    verdict: str,
    output: str | None,
    error: str | None,
    by: str | None,
    episode: int | None,
) -> None:
    """Resolve an in-doubt step's episode (looked up and shown when not given)."""
    value = _json_arg(output, "--output")

    async def body(env: Embedded) -> Any:
        ep = episode or await open_episode(env.runtime, execution_id, step_id)
        who = recorded_by(local_principal(), by) or local_principal()
        return await env.runtime.verdict(
            execution_id, step_id, verdict, output=value, error=error, by=who, episode=ep
        )

    _print_result(_with(settings, body))


@main.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.option("--reason", default="cancelled from the CLI")
@click.pass_obj
def cancel(settings: Settings, execution_id: str, reason: str) -> None:
    """Cancel an execution."""
    _print_result(
        _with(
            settings,
            lambda env: env.runtime.cancel(execution_id, reason, by=local_principal()),
            need_app=settings.app is not None,  # with the app, the cleanup runs here
        )
    )


@main.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a timeline.")
@click.pass_obj
def show(settings: Settings, execution_id: str, as_json: bool) -> None:
    """Show an execution's state and timeline."""
    from loom.cli_render import render_timeline, show_json

    async def body(env: Embedded) -> tuple[Any, Any]:
        await env.runtime.require(execution_id)
        return await env.runtime.result(execution_id), await env.runtime.history(execution_id)

    result, events = _with(settings, body, need_app=False)
    if as_json:
        click.echo(json.dumps(show_json(result, events), indent=2))
    else:
        render_timeline(result, events)


@main.command(name="ls")
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array instead of a table.")
@click.pass_obj
def list_executions(settings: Settings, status: str | None, as_json: bool) -> None:
    """List executions (in-doubt ones with their steps and keys)."""
    from loom.cli_hints import list_json
    from loom.cli_render import render_list

    async def body(env: Embedded) -> tuple[Any, Any]:
        rows = await env.runtime.list(status)
        doubts = {
            r.execution_id: await env.runtime.result(r.execution_id)
            for r in rows
            if r.status == "in_doubt"
        }
        return rows, doubts

    rows, doubts = _with(settings, body, need_app=False)
    if as_json:
        click.echo(json.dumps(list_json(rows, doubts), indent=2))
    else:
        render_list(rows, doubts)


@main.command()
@click.option(
    "--use-store",
    is_flag=True,
    help="Run in the configured --store instead of a fresh SQLite file.",
)
@click.pass_obj
def demo(settings: Settings, use_store: bool) -> None:
    """Run the example flows end to end (a fresh SQLite file), with a crash and recovery."""
    from loom.demo import run_demo

    _run(run_demo(settings.store if use_store else None))


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True)
@click.pass_obj
def serve(settings: Settings, host: str, port: int) -> None:
    """Serve the HTTP worker locally on the embedded store.

    Resume and verdict need LOOM_RESUME_SECRET (16+ characters; callers send it as
    'Authorization: Bearer <secret>'); without it they are refused.
    """
    from loom.workers.server import serve_forever

    serve_forever(settings.app, settings.store, host, port)


register_deploy_commands(main)

from loom.cli_fork import fork as _fork  # noqa: E402 - registers after the group exists
from loom.cli_messages import get_event as _get_event  # noqa: E402 - the same
from loom.cli_messages import send as _send  # noqa: E402 - the same
from loom.cli_purge import purge as _purge  # noqa: E402 - registers after the group exists
from loom.cli_queues import queues as _queues  # noqa: E402 - registers after the group exists
from loom.cli_retry import retry as _retry  # noqa: E402 - registers after the group exists
from loom.cli_schedules import schedules as _schedules  # noqa: E402 - registers after the group

main.add_command(_purge)
main.add_command(_retry)
main.add_command(_fork)
main.add_command(_schedules)
main.add_command(_queues)
main.add_command(_send)
main.add_command(_get_event)

if __name__ == "__main__":  # pragma: no cover
    main()
