"""The core commands: start, execute, resume, verdict, cancel, show, demo, serve."""

from __future__ import annotations

import json
import uuid
from typing import Any

import click

from loom.cli.authority import local_principal, open_episode
from loom.cli.base import (
    Embedded,
    Settings,
    json_arg,
    print_result,
    run_async,
    settle,
    with_env,
)
from loom.cli.hints import resume_checked
from loom.cli.types import EXECUTION_ID
from loom.grants import recorded_by
from loom.primitives.queues import queue_ref


@click.command()
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
@click.option("--priority", type=int, default=None, help="With --queue: lower runs first.")
@click.option(
    "--dedup-id", default=None, help="With --queue: refused while one with it is queued/running."
)
@click.option("--delay", type=float, default=None, help="With --queue: seconds before it may run.")
@click.option(
    "--queue-timeout", type=float, default=None, help="With --queue: seconds from its dequeue."
)
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
    priority: int | None,
    dedup_id: str | None,
    delay: float | None,
    queue_timeout: float | None,
    timeout: float | None,
    limits: tuple[str, ...],
) -> None:
    """Start FLOW (idempotent by --id) and run it until it blocks; exit 1 if it failed."""
    value = json_arg(input_json, "--input")
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
            queue=queue_ref(
                queue,
                partition_key,
                priority=priority,
                deduplication_id=dedup_id,
                delay=delay,
                timeout=queue_timeout,
            ),
            timeout=timeout,
            budgets=budgets,
        )
        return await settle(env, result.execution_id, wait)

    print_result(with_env(settings, body, running=execution_id), check=True)


def _limits_arg(pairs: tuple[str, ...]) -> dict[str, float] | None:
    """``--limit NAME=N`` options as a dict (checked by the start: loom.kernel.execution_limits)."""
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


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.pass_obj
def execute(settings: Settings, execution_id: str) -> None:
    """One execute call on an existing execution (what a worker does); exit 1 if it failed."""
    from loom.wire import ExecutionPackage

    async def body(env: Embedded) -> Any:
        await env.runtime.require(execution_id)
        return await env.runtime.execute(ExecutionPackage(execution_id=execution_id))

    print_result(with_env(settings, body, running=execution_id), check=True)


@click.command()
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
    value = json_arg(payload, "--payload")

    async def body(env: Embedded) -> Any:
        await resume_checked(env.runtime, execution_id, on, key, value, strict)
        return await settle(env, execution_id, wait)

    print_result(with_env(settings, body, running=execution_id), check=True)


@click.command()
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
    value = json_arg(output, "--output")

    async def body(env: Embedded) -> Any:
        ep = episode or await open_episode(env.runtime, execution_id, step_id)
        who = recorded_by(local_principal(), by) or local_principal()
        return await env.runtime.verdict(
            execution_id, step_id, verdict, output=value, error=error, by=who, episode=ep
        )

    print_result(with_env(settings, body))


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.option("--reason", default="cancelled from the CLI")
@click.pass_obj
def cancel(settings: Settings, execution_id: str, reason: str) -> None:
    """Cancel an execution."""
    print_result(
        with_env(
            settings,
            lambda env: env.runtime.cancel(execution_id, reason, by=local_principal()),
            need_app=settings.app is not None,  # with the app, the cleanup runs here
        )
    )


@click.command()
@click.argument("execution_id", type=EXECUTION_ID)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a timeline.")
@click.pass_obj
def show(settings: Settings, execution_id: str, as_json: bool) -> None:
    """Show an execution's state and timeline."""
    from loom.cli.render import render_timeline, show_json

    async def body(env: Embedded) -> tuple[Any, Any]:
        await env.runtime.require(execution_id)
        return await env.runtime.result(execution_id), await env.runtime.history(execution_id)

    result, events = with_env(settings, body, need_app=False)
    if as_json:
        click.echo(json.dumps(show_json(result, events), indent=2))
    else:
        render_timeline(result, events)


@click.command()
@click.option(
    "--use-store",
    is_flag=True,
    help="Run in the configured --store instead of a fresh SQLite file.",
)
@click.pass_obj
def demo(settings: Settings, use_store: bool) -> None:
    """Run the example flows end to end (a fresh SQLite file), with a crash and recovery."""
    from loom.cli.demo import run_demo

    run_async(run_demo(settings.store if use_store else None))


@click.command()
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
