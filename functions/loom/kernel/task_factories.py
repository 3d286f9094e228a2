"""Loom's task factory alongside another one already on the event loop.

Step ids of tasks a flow creates come from the loop's task factory (see
:mod:`loom.kernel.context`): the factory gives each such task a scope numbered from its parent's.
Other libraries install task factories too (error reporters and tracers wrap every task to
carry their own context). Refusing to run beside them would keep an application that uses
one from running flows; overwriting theirs would silently switch their instrumentation off.
So Loom composes with what it finds:

* **Theirs wraps ours** (installed after Loom's, calling the factory it found): the tasks
  already go through Loom's factory. A probe confirms it once per factory, then nothing
  changes.
* **Ours is not in theirs** (installed before Loom ran, or replacing Loom's): Loom installs
  :class:`ComposedTaskFactory`, which scopes a flow's task as Loom's own factory does and
  lets theirs build it. Theirs runs inside the child's context, so the task takes the
  child's scope whether or not theirs passes ``context=`` on.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from loom.kernel.context import SCOPE, Scope, made_by_wait_for, outside_flow, task_factory

if TYPE_CHECKING:
    from loom.kernel.session import Session

Factory = Callable[..., "asyncio.Future[Any]"]

# Factories seen to pass a flow's tasks through Loom's (weakly held: a factory replaced
# on its loop, and nothing else holding it, is forgotten with it).
_VERIFIED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


class ComposedTaskFactory:
    """Loom's scoping in front of another task factory, which builds the task.

    Args:
        theirs: The factory that was on the loop, called as asyncio calls factories.
    """

    __slots__ = ("__weakref__", "theirs")

    def __init__(self, theirs: Factory) -> None:
        self.theirs = theirs

    def __call__(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: contextvars.Context | None = None,
        **options: Any,
    ) -> asyncio.Future[Any]:
        parent = SCOPE.get() if context is None else context.get(SCOPE)
        if parent is None:  # not a flow's task: exactly what theirs alone would do
            return self._build(loop, coro, context, options)
        if (outside := outside_flow(coro, context)) is not None:  # no flow's: no step id
            given = None if context is None else outside
            return outside.run(self._build, loop, coro, given, options)
        if parent.flat_wait_for and made_by_wait_for():  # it shares its parent's scope
            task = self._build(loop, coro, context, options)
            parent.session.track(cast("asyncio.Task[Any]", task))
            return task
        child_context = context.copy() if context is not None else contextvars.copy_context()
        child_context.run(SCOPE.set, parent.child())
        # Theirs runs inside the child's context: a factory that drops ``context=`` builds
        # the task in the current context, which is then the child's.
        given = None if context is None else child_context
        task = child_context.run(self._build, loop, coro, given, options)
        parent.session.track(cast("asyncio.Task[Any]", task))
        return task

    def _build(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: contextvars.Context | None,
        options: dict[str, Any],
    ) -> asyncio.Future[Any]:
        # ``context=`` is passed on only if given, as asyncio does: older factories take none.
        if context is None:
            return self.theirs(loop, coro, **options)
        return self.theirs(loop, coro, context=context, **options)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make tasks created inside flows take step scopes on ``loop``, keeping any other task
    factory installed there working (idempotent; see the module docstring)."""
    current = loop.get_task_factory()
    if current is None:
        loop.set_task_factory(task_factory)  # type: ignore[arg-type]
    elif not _scopes_flow_tasks(loop, current):
        loop.set_task_factory(ComposedTaskFactory(current))  # type: ignore[arg-type]


def _scopes_flow_tasks(loop: asyncio.AbstractEventLoop, factory: Factory) -> bool:
    if factory is task_factory or isinstance(factory, ComposedTaskFactory):
        return True
    return _passes_through_ours(loop, factory)


def _passes_through_ours(loop: asyncio.AbstractEventLoop, factory: Factory) -> bool:
    """Whether ``factory`` scopes a flow's task through Loom's factory: one probe task per
    factory, cancelled before it runs."""
    try:
        return _VERIFIED[factory]
    except (KeyError, TypeError):  # TypeError: not weakly referenceable, probe each time
        pass
    probe = _Probe()
    context = contextvars.copy_context()
    scope = Scope("", cast("Session", probe))
    context.run(SCOPE.set, scope)
    never = _never()
    task = context.run(factory, loop, never)  # as asyncio calls it, without context=
    task.cancel()  # it ends at its first turn, before running a line
    never.close()  # (a factory may have wrapped it in a coroutine of its own)
    passes = scope.n == 1 and probe.tracked == [task]
    with contextlib.suppress(TypeError):
        _VERIFIED[factory] = passes
    return passes


class _Probe:
    """Stands for a session while probing: records the tasks Loom's factory tracks."""

    def __init__(self) -> None:
        self.tracked: list[asyncio.Future[Any]] = []

    def track(self, task: asyncio.Future[Any]) -> None:
        self.tracked.append(task)


async def _never() -> None:
    """The probe task's coroutine: cancelled before its first line."""


def install_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    """Make tasks created inside flows take deterministic step scopes (idempotent).

    Another library's task factory already on the loop keeps working: Loom composes with it
    (:mod:`loom.kernel.task_factories`).
    """
    if loop.get_task_factory() is not task_factory:
        install(loop)
