"""What an app registers: flows and effects, with their types, versions and delivery policy.

Types come from annotations: a flow's or effect's second parameter is its input type and its
return annotation its output type; pydantic validates and serializes both, so a pydantic
model, a dataclass or a plain JSON value all work.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from loom.errors import ConfigurationError, InvalidPayloadError

if TYPE_CHECKING:
    from loom.kernel.execution_limits import Limits
    from loom.kernel.runtime import Runtime
    from loom.kernel.state import ExecutionState

F = TypeVar("F", bound=Callable[..., Any])

ResumeCheck = Callable[["Runtime", "ExecutionState", str, Any], Awaitable[Any]]
"""``check(runtime, state, correlation_key, payload) -> payload``: admits a resume for one
kind of gate before it is appended (raise an :class:`~loom.errors.InputError` to refuse it)."""


@dataclass(frozen=True)
class Retry:
    """How an effect is retried, every attempt with the same key.

    Attempts after the first are recorded before they run, so the budget is per step and
    counts across crashes: a worker killed mid-retry leaves its successor what is left.

    Attributes:
        max_attempts: Attempts in all, the first included (1 = no retry).
        initial_interval: Seconds before the second attempt.
        backoff: Multiplier applied to the interval after each attempt.
        max_interval: Upper bound of one wait, in seconds; by default 100 times
            ``initial_interval`` (as Temporal does), so a long first interval is honoured.
        jitter: Fraction of each wait drawn at random (0.2 = ±20 %), so retries spread out.
        non_retryable: Exception types that fail the step at once.
    """

    max_attempts: int = 3
    initial_interval: float = 0.1
    backoff: float = 2.0
    max_interval: float | None = None
    jitter: float = 0.2
    non_retryable: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"Retry.max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_interval < 0 or (self.max_interval or 0) < 0:
            raise ConfigurationError("Retry intervals must not be negative")

    @property
    def interval_cap(self) -> float:
        """The longest single wait: ``max_interval``, or 100 times ``initial_interval``."""
        return self.max_interval if self.max_interval is not None else 100 * self.initial_interval


def seconds(value: float | timedelta | None) -> float | None:
    """``value`` in seconds (a ``timedelta`` converted)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _io_types(fn: Callable[..., Any], what: str) -> tuple[Any, Any]:
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 2:
        raise ConfigurationError(f"{what} {fn.__name__} must take (ctx, input), got {params}")
    hints = get_type_hints(fn)
    return hints.get(params[1].name, Any), hints.get("return", Any)


_SCALARS = (int, str, float, bool)


class _Typed:
    """Validation and serialization of one callable's input and output."""

    def __init__(self, fn: Callable[..., Any], what: str, name: str) -> None:
        in_type, out_type = _io_types(fn, what)
        self.input_adapter: TypeAdapter[Any] = TypeAdapter(in_type)
        self.output_adapter: TypeAdapter[Any] = TypeAdapter(out_type)
        self._what, self._name = what, name
        # A value of exactly the declared scalar type validates to itself: skip the validator
        # (per step, twice). ``bool`` is its own type here, so ``True`` never passes as int.
        self._in_exact = in_type if in_type in _SCALARS else None
        self._out_exact = out_type if out_type in _SCALARS else None

    def parse_input(self, value: Any) -> Any:
        """Validate a JSON value (or an instance) as this callable's input."""
        if type(value) is self._in_exact:
            return value
        try:  # (the adapter's own validator: its method only forwards defaults, per step)
            return self.input_adapter.validator.validate_python(value)
        except ValidationError as exc:
            raise InvalidPayloadError(
                f"input for {self._what} {self._name!r} is invalid: {one_line(exc)}",
                details={"errors": exc.errors(include_url=False, include_context=False)},
            ) from None

    def parse_output(self, value: Any) -> Any:
        """Validate a recorded JSON value as this callable's output."""
        if type(value) is self._out_exact:
            return value
        try:
            return self.output_adapter.validator.validate_python(value)
        except ValidationError as exc:
            raise InvalidPayloadError(
                f"output of {self._what} {self._name!r} is invalid: {one_line(exc)}",
                details={"errors": exc.errors(include_url=False, include_context=False)},
            ) from None


def one_line(exc: ValidationError) -> str:
    """A validation error as one line: ``field: what is wrong; other.field: …``."""
    parts: list[str] = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)


def to_json_value(value: Any) -> Any:
    """A JSON-able form of a model, dataclass or plain value.

    Raises:
        InvalidPayloadError: ``value`` nests too deep for the serializer (it raised a bare
            ``ValueError``, answered 500 by the worker).
    """
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError:
        raise
    except ValueError as exc:
        raise InvalidPayloadError(
            f"value nests too deep to serialize: {exc}", code="too_deep"
        ) from None


@dataclass(eq=False)
class EffectDef:
    """A registered effect: the function and its delivery policy."""

    name: str
    fn: Callable[..., Any]
    idempotent: bool = True
    retry: Retry = field(default_factory=Retry)
    timeout: float | None = None
    requires: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.typed = _Typed(self.fn, "effect", self.name)
        self.is_async = inspect.iscoroutinefunction(self.fn)

    def __call__(self, ctx: Any, value: Any) -> Any:
        """Call the underlying function directly (for unit tests of the effect)."""
        return self.fn(ctx, value)


@dataclass(eq=False)
class FlowDef:
    """A registered flow."""

    name: str
    fn: Callable[..., Coroutine[Any, Any, Any]]
    version: str = "1"
    timeout: float | None = None  # seconds from the start; then cancelled, with cleanup
    cleanup_timeout: float = 300.0  # seconds a cancelled execution's cleanup may run
    durability: str = "strict"  # or "batched": see loom.kernel.durability
    limits: Limits | None = None  # its own limits (loom.kernel.execution_limits); None: the app's

    def __post_init__(self) -> None:
        if not inspect.iscoroutinefunction(self.fn):
            raise ConfigurationError(f"flow {self.name!r} must be an async function")
        self.typed = _Typed(self.fn, "flow", self.name)
        check_durability(self.durability)


DURABILITIES = ("strict", "batched")


def check_durability(value: str) -> str:
    """``value`` if it is one of :data:`DURABILITIES`, else ``ConfigurationError``."""
    if value not in DURABILITIES:
        raise ConfigurationError(f"durability must be one of {DURABILITIES}, got {value!r}")
    return value


def version_key(version: str) -> tuple[int, int, str]:
    """Sort key of flow versions: numbers numerically (``"10"`` after ``"9"``), then text."""
    return (0, int(version), "") if version.isdigit() else (1, 0, version)


def check_version(version: str | int) -> str:
    """A flow version as text, or ``ConfigurationError`` if it is unusable."""
    text = str(version)
    if isinstance(version, bool) or not text or len(text) > 64 or not text.isprintable():
        raise ConfigurationError(f"flow version {version!r} must be a short number or name")
    return text


def flow_limits(
    name: str, timeout: float | timedelta | None, cleanup: float | timedelta
) -> tuple[float | None, float]:
    """A flow's timeout and cleanup budget in seconds, or ``ConfigurationError``."""
    limits = (seconds(timeout), seconds(cleanup))
    if any(v is not None and not v > 0 for v in limits):  # also refuses NaN
        raise ConfigurationError(f"flow {name!r}: timeout and cleanup_timeout must be > 0")
    return limits[0], limits[1] or 0.0


def call_effect(defn: EffectDef, ctx: Any, value: Any) -> Awaitable[Any]:
    """Invoke an effect: async directly, sync in a worker thread (await what it returns).

    Not a coroutine itself: the effect's own coroutine is awaited without a frame around it.
    """
    if defn.is_async:
        return defn.fn(ctx, value)
    return asyncio.to_thread(defn.fn, ctx, value)
