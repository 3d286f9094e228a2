"""What every ``loom`` command shares: the settings, the embedded runtime, the group.

The commands live in the modules beside it (``loom.cli.commands`` the core ones, one module
per command group); ``loom.cli`` assembles them on :func:`main`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from loom.cli.authority import apply_env_grants
from loom.cli.hints import exit_for, interrupted
from loom.config import DEFAULT_STORE, load_app, open_blob_store, open_store
from loom.errors import ConfigurationError, InputError, LoomError, StoreError, StoreLimitError

T = TypeVar("T")
EX_TEMPFAIL = 75


@dataclass
class Settings:
    """Options shared by every command."""

    app: str | None
    store: str


def fail(message: str, code: int) -> None:
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(code)


def run_async(coro: Awaitable[T]) -> T:
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except (InputError, StoreLimitError) as exc:  # a retry fails the same way
        fail(exc.message, 2)
    except ConfigurationError as exc:  # a setting to fix, like bad input: exit 2
        fail(f"{exc.code}: {exc.message}", 2)
    except StoreError as exc:
        fail(
            f"{exc.code}: {exc.message} (retry later: the log keeps what was recorded)", EX_TEMPFAIL
        )
    except LoomError as exc:
        fail(f"{exc.code}: {exc.message}", 1)
    raise AssertionError("unreachable")


def json_arg(text: str | None, what: str) -> Any:
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


def with_env(
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
        return run_async(go())
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


def print_result(result: Any, check: bool = False) -> None:
    from loom.cli.render import render_result

    render_result(result)
    if check:
        exit_for(result)


async def settle(env: Embedded, execution_id: str, wait: float) -> Any:
    if wait > 0:
        with contextlib.suppress(TimeoutError):
            await env.dispatcher.drain(timers_within=wait, timeout=wait + 5)
    return await env.runtime.result(execution_id)
