"""Queries: read a value the flow's own code computes from where it stands (Temporal's query).

The flow registers a handler, a plain ``def`` over its local state::

    ctx.set_query_handler("progress", lambda: {"done": done, "of": total})

and a caller asks it: ``Runtime.query(id, "progress")``, ``loom query ID progress``,
``POST /executions/{id}/query``. The answer is computed by replaying the execution's log in
memory to where it stands (:mod:`loom.primitives.replay_view`) and calling the handler
there: on a running, suspended, parked or finished execution alike, without advancing it
and without writing anything. A handler registered later in the flow than it has got is
not there yet (:class:`~loom.errors.UnknownQueryError`, naming those that are).

A query handler must only read: it runs on a replay that is thrown away, so what it changes
is lost, and it takes no step (no ``ctx`` call): it is a plain ``def``.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from loom.errors import InputError, QueryFailedError, UnknownQueryError
from loom.ids import check_execution_id
from loom.kernel.context import FlowContext, owned
from loom.kernel.effects import message_of
from loom.kernel.primitive import Primitive
from loom.primitives import handlers
from loom.primitives.replay_view import DEFAULT_TIMEOUT, viewing

if TYPE_CHECKING:
    from collections.abc import Callable

    from loom.kernel.runtime import Runtime

__all__ = ["check_query_name", "query"]


def check_query_name(name: object) -> str:
    """``name`` if it can name a query, else :class:`InputError`."""
    if not isinstance(name, str) or not name or len(name) > handlers.MAX_NAME:
        raise InputError(
            f"a query name is a non-empty string of at most {handlers.MAX_NAME} characters, "
            f"got {name!r}",
            code="invalid_query",
        )
    return name


async def query(
    rt: Runtime, execution_id: str, name: str, args: Any = None, *, timeout: float = DEFAULT_TIMEOUT
) -> Any:
    """The JSON value of the query handler ``name`` of ``execution_id`` called on ``args``
    (see the module docstring); nothing is written.

    Raises:
        UnknownExecutionError: No such execution.
        UnknownQueryError: The flow registered no query handler ``name`` (yet).
        InvalidPayloadError: ``args`` do not fit the handler's parameter, or what it returned
            is not JSON.
        QueryFailedError: The handler raised, or the flow cannot be replayed here.
    """
    eid = check_execution_id(execution_id)
    check_query_name(name)
    value = handlers.as_json(args, "a query's arguments")
    await rt.require(eid)
    state = await rt.load_state(eid)
    async with viewing(rt, state, timeout) as view:
        found = view.handlers.query(name)
        if found is None:
            names = sorted(view.handlers.queries)
            raise UnknownQueryError(
                f"execution {eid!r} has no query handler {name!r} where it stands "
                f"(registered: {', '.join(names) or 'none'})",
                details={"execution_id": eid, "query": name, "registered": names},
            )
        parsed = found.parse(value)
        try:
            result = found.call(found.fn, parsed, name)
        except Exception as exc:
            raise QueryFailedError(
                f"query {name!r} of {eid!r} raised {type(exc).__name__}: {message_of(exc)}",
                details={"execution_id": eid, "query": name, "type": type(exc).__name__},
            ) from exc
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise QueryFailedError(f"query handler {name!r} returned an awaitable, not a value")
        return handlers.as_json(result, f"what query {name!r} returned")


class QueriesContext(FlowContext):
    """The ``ctx`` method of queries."""

    __slots__ = ()

    def set_query_handler(self, name: str, handler: Callable[..., Any] | None) -> None:
        """Answer queries ``name`` with ``handler`` (a plain ``def`` of no argument or one,
        reading the flow's state); ``None`` removes it. Not a step: see
        :mod:`loom.primitives.queries`.

        Raises:
            ConfigurationError: A bad name, an ``async`` handler, or one of two or more
                parameters.
        """
        owned(self)
        handlers.check_name(name, "query")
        known = handlers.of(self._session).queries
        if handler is None:
            known.pop(name, None)
        else:
            known[name] = handlers.handler(handler, "query")

    def set_dynamic_query_handler(self, handler: Callable[..., Any] | None) -> None:
        """Answer queries of every name no other handler has with ``handler(name, args)``
        (``args`` as JSON); ``None`` removes it (Temporal's dynamic query handler)."""
        owned(self)
        registry = handlers.of(self._session)
        registry.dynamic_query = None if handler is None else handlers.dynamic(handler, "query")


PRIMITIVE = Primitive("queries", context=QueriesContext)
