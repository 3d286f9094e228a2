"""The update and query handlers a flow registers, kept per session.

``ctx.set_update_handler(name, fn, validator=...)`` and ``ctx.set_query_handler(name, fn)``
are no steps: they take no step id and write nothing. The flow's own code registers its
handlers as it runs, so a replay registers the same handlers at the same points, and the
registry of a session is what that session's flow has registered so far. A handler is a
closure over the flow's local state (Temporal's handlers are methods of the workflow
object; a Loom flow is a function, so its state lives in its locals):

    @app.flow("cart")
    async def cart(ctx: FlowContext, _: None) -> list[str]:
        items: list[str] = []

        async def add(item: str) -> int:
            items.append(item)
            return len(items)

        ctx.set_update_handler("add", add, validator=lambda item: None)
        ctx.set_query_handler("items", lambda: list(items))
        ...

A handler takes no argument or one (the update's or query's ``args``), typed by its
annotation like a flow's input: a pydantic model, a dataclass or a JSON value.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, get_type_hints

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from loom.errors import ConfigurationError, InvalidPayloadError
from loom.kernel.defs import one_line, to_json_value

if TYPE_CHECKING:
    from loom.kernel.session import Session

__all__ = ["Handler", "Handlers", "as_json", "check_name", "dynamic", "handler", "of"]

MAX_NAME: Final = 256


def as_json(value: Any, what: str) -> Any:
    """``value`` as JSON (a model, a dataclass, a tuple...), or :class:`InvalidPayloadError`
    naming ``what`` it is when it has no JSON form."""
    try:
        return to_json_value(value)
    except PydanticSerializationError as exc:
        raise InvalidPayloadError(
            f"{what} is no JSON value ({type(value).__name__}): {exc}", code="not_json"
        ) from None


def check_name(name: object, what: str) -> str:
    """``name`` if it is a usable handler name, else :class:`ConfigurationError`."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ConfigurationError(
            f"a {what} handler's name is a non-empty string of at most {MAX_NAME} "
            f"characters, got {name!r}"
        )
    return name


@dataclass(frozen=True)
class Handler:
    """A registered handler: the function, whether it takes the argument, how that is typed.

    Attributes:
        fn: The handler.
        takes_arg: Whether it takes the argument (else it is called with none).
        validator: An update's validator (same parameters, called before acceptance).
    """

    fn: Callable[..., Any]
    takes_arg: bool
    adapter: TypeAdapter[Any] | None = None
    validator: Callable[..., Any] | None = None
    dynamic: bool = False  # called with the name asked for and the argument

    def parse(self, value: Any) -> Any:
        """``value`` (JSON) as the handler's declared argument type.

        Raises:
            InvalidPayloadError: It does not fit.
        """
        if self.adapter is None:
            return value
        try:
            return self.adapter.validate_python(value)
        except ValidationError as exc:
            raise InvalidPayloadError(
                f"arguments of handler {getattr(self.fn, '__name__', '?')!r} are invalid: "
                f"{one_line(exc)}",
                details={"errors": exc.errors(include_url=False, include_context=False)},
            ) from None

    def call(self, fn: Callable[..., Any], value: Any, name: str) -> Any:
        """Call ``fn`` (the handler or its validator) with the parsed argument, if it takes
        one; a dynamic handler's with ``name`` first."""
        if self.dynamic:
            return fn(name, value)
        return fn(value) if self.takes_arg else fn()


# Adapters by the handler's code: a closure registered again on every replay, typed once.
_ADAPTERS: dict[object, tuple[bool, TypeAdapter[Any] | None]] = {}


def handler(
    fn: Callable[..., Any], what: str, validator: Callable[..., Any] | None = None
) -> Handler:
    """A :class:`Handler` for ``fn``, checked.

    Raises:
        ConfigurationError: ``fn`` takes more than one parameter, a query handler or a
            validator is ``async`` (they compute from the flow's state and wait for
            nothing).
    """
    if not callable(fn):
        raise ConfigurationError(f"a {what} handler must be callable, got {fn!r}")
    if what == "query" and inspect.iscoroutinefunction(fn):
        raise ConfigurationError("a query handler is a plain def: it reads the flow's state")
    _check_validator(validator)
    code = getattr(fn, "__code__", None)
    typed = _ADAPTERS.get(code) if code is not None else None
    if typed is None:
        typed = _typed(fn, what)
        if code is not None:
            _ADAPTERS[code] = typed
    return Handler(fn, typed[0], typed[1], validator)


def dynamic(
    fn: Callable[..., Any], what: str, validator: Callable[..., Any] | None = None
) -> Handler:
    """A handler of every name no other handler has: ``fn(name, args)``, ``args`` as JSON.

    Raises:
        ConfigurationError: As :func:`handler`.
    """
    if not callable(fn) or (what == "query" and inspect.iscoroutinefunction(fn)):
        raise ConfigurationError(f"a dynamic {what} handler is a callable (name, args)")
    _check_validator(validator)
    return Handler(fn, True, None, validator, dynamic=True)


def _check_validator(validator: Callable[..., Any] | None) -> None:
    if validator is not None and (
        not callable(validator) or inspect.iscoroutinefunction(validator)
    ):
        raise ConfigurationError("an update validator is a plain def that raises to refuse")


def _typed(fn: Callable[..., Any], what: str) -> tuple[bool, TypeAdapter[Any] | None]:
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(params) > 1:
        raise ConfigurationError(
            f"a {what} handler takes at most one argument (the update's or query's args), "
            f"{getattr(fn, '__name__', fn)!r} takes {len(params)}"
        )
    if not params:
        return False, None
    try:
        hint = get_type_hints(fn).get(params[0].name, Any)
    except (NameError, TypeError):  # a type local to the flow: taken as the JSON it is
        hint = Any
    return True, None if hint is Any else TypeAdapter(hint)


@dataclass
class Handlers:
    """What one session's flow registered, and the update handlers running in it.

    Attributes:
        updates: Update handlers by name.
        queries: Query handlers by name.
        dynamic_update: The update handler of every other name, if any.
        dynamic_query: The query handler of every other name, if any.
        listening: Whether the session's update listener runs (started by the first
            update handler registered).
        running: Update handlers running now.
    """

    updates: dict[str, Handler] = field(default_factory=dict[str, Handler])
    queries: dict[str, Handler] = field(default_factory=dict[str, Handler])
    dynamic_update: Handler | None = None
    dynamic_query: Handler | None = None
    listening: bool = False
    running: int = 0
    _idle: asyncio.Event | None = None

    def update(self, name: str) -> Handler | None:
        """The update handler of ``name``: its own, else the dynamic one."""
        return self.updates.get(name) or self.dynamic_update

    def query(self, name: str) -> Handler | None:
        """The query handler of ``name``: its own, else the dynamic one."""
        return self.queries.get(name) or self.dynamic_query

    def started(self) -> None:
        """An update handler began."""
        self.running += 1
        if self._idle is not None:
            self._idle.clear()

    def finished(self) -> None:
        """An update handler ended (returned, raised or was cancelled)."""
        self.running -= 1
        if self.running == 0 and self._idle is not None:
            self._idle.set()

    async def idle(self) -> None:
        """Return once no update handler runs."""
        if self.running == 0:
            return
        if self._idle is None:
            self._idle = asyncio.Event()
        await self._idle.wait()


# Kept on the session itself, not in a weak-key map: the handlers are closures over the
# flow's locals, whose ``ctx`` holds the session, so a map's value would keep its own key
# (and every session whose flow registered a handler) alive for the process's life.
_ATTR: Final = "_loom_handlers"


def of(session: Session) -> Handlers:
    """The handlers ``session``'s flow registered so far."""
    found = known(session)
    if found is None:
        found = Handlers()
        setattr(session, _ATTR, found)
    return found


def known(session: Session) -> Handlers | None:
    """The handlers of ``session``, if its flow registered any."""
    found: object = getattr(session, _ATTR, None)
    return found if isinstance(found, Handlers) else None
