"""The step scope of the flow task running now, and the engine's calls kept out of it.

A flow's tasks carry a :class:`~loom.kernel.context.Scope` in the context variable :data:`SCOPE`:
the step ids of what the flow awaits come from it, and so do the ids of the tasks it creates
(the loop's task factory numbers them, :mod:`loom.kernel.context`). Step ids must be a function of
the flow's own awaits only. Anything else that runs while a flow task is current — a store
or blob client (gRPC creates a task per call), a dispatcher, a lease set, a worker runtime,
an execution run inline for a message or a child — would take ids that a replay does not
take. So every method of those interfaces runs with :data:`SCOPE` cleared:
:func:`off_scope_methods` wraps the coroutine methods each backend defines (the SPIs'
``__init_subclass__`` calls it), and engine code that calls out in the flow's task uses
:func:`off_scope`.

This module imports nothing of Loom's: the SPIs below the kernel use it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loom.kernel.context import Scope

SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("loom_scope", default=None)
"""The step scope of the current flow task (``None`` outside every flow)."""

# The wrappers this module made, so a class wrapped again (a subclass, telemetry's turn on)
# is not wrapped twice.
_WRAPPERS: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


class _OffScope:
    """``with off_scope():`` as a plain class: a generator-based context manager costs a
    few microseconds more on a path every step takes."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = SCOPE.set(None)

    def __exit__(self, *_: object) -> None:
        SCOPE.reset(self._token)


def off_scope() -> contextlib.AbstractContextManager[None]:
    """Run store and dispatch calls made for a step outside the flow's step scope: a task
    they create (a store client's, a receiver run inline) must not take a step id."""
    return _OffScope()


def off_scope_methods(cls: type) -> None:
    """Make every public coroutine method ``cls`` defines run with :data:`SCOPE` cleared.

    A call made outside any flow (the usual: the engine clears the scope around its own
    appends) costs one plain function call more, nothing else.
    """
    for name, fn in list(cls.__dict__.items()):
        if name.startswith("_") or fn in _WRAPPERS:
            continue
        if getattr(fn, "__isabstractmethod__", False) or not inspect.iscoroutinefunction(fn):
            continue
        setattr(cls, name, off_scope_method(fn))


def off_scope_method(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``fn`` (a method returning an awaitable) run with :data:`SCOPE` cleared when called
    inside a flow's task."""
    if fn in _WRAPPERS:
        return fn

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        if SCOPE.get() is None:
            return fn(self, *args, **kwargs)
        return _call_off_scope(fn, self, args, kwargs)

    _WRAPPERS.add(method)
    return method


async def _call_off_scope(
    fn: Callable[..., Awaitable[Any]], this: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    token = SCOPE.set(None)
    try:
        return await fn(this, *args, **kwargs)
    finally:
        SCOPE.reset(token)
