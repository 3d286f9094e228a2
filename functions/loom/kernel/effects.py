"""Invoking an effect: retries with backoff and jitter, a timeout per attempt, cancellation.

Every attempt carries the same idempotency key. The outcome is returned, not raised, so the
session records exactly one ``EffectCompleted`` or ``EffectFailed`` per step.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from loom.errors import (
    BudgetExceededError,
    EffectOutcomeUnknownError,
    InvalidPayloadError,
    LoomError,
)
from loom.events import SCHEMA_VERSION, EffectCompleted, EffectFailed, ErrorInfo, unvalidated
from loom.kernel.context import EffectContext
from loom.kernel.context import _Signal as Signal  # pyright: ignore[reportPrivateUsage]
from loom.kernel.defs import EffectDef, Retry, call_effect, to_json_value
from loom.kernel.exits import EXITS, exit_signal
from loom.kernel.fold import Meter
from loom.kernel.payloads import dump_exact
from loom.kernel.timed_threads import in_daemon_thread
from loom.telemetry import step_span


@dataclass(slots=True)  # (not frozen: a frozen init sets each field through object.__setattr__)
class Outcome:
    """What an invocation came to: a JSON-able value or an error, and what it cost."""

    value: Any
    error: ErrorInfo | None
    attempts: int
    duration: float
    retry_at: float | None = None  # a backoff too long to wait inline: retry at this time
    raw: bytes = b""  # the value's exact JSON (checked once, reused to store it)


def backoff_delay(policy: Retry, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed ``attempt`` (1-based), with jitter."""
    base = min(policy.initial_interval * policy.backoff ** (attempt - 1), policy.interval_cap)
    spread = base * policy.jitter
    return max(0.0, base + (rng or random).uniform(-spread, spread))


def _attempt(
    defn: EffectDef, ectx: EffectContext, value: Any, clock: Callable[[], float]
) -> Awaitable[Any]:
    if defn.timeout is None:  # the common case: the effect's own awaitable, no frame around it
        return call_effect(defn, ectx, value)
    return _timed(defn, ectx, value, clock)


async def _timed(
    defn: EffectDef, ectx: EffectContext, value: Any, clock: Callable[[], float]
) -> Any:
    assert defn.timeout is not None
    ectx.deadline = clock() + defn.timeout
    try:
        async with asyncio.timeout(defn.timeout):
            if defn.is_async:
                return await call_effect(defn, ectx, value)
            # (not the loop's pool: a call that outlives its timeout must hold no pool
            # thread and not the process at exit, see loom.kernel.timed_threads)
            return await in_daemon_thread(defn.fn, ectx, value)
    except TimeoutError:
        ectx.cancel()  # a sync effect in its thread sees ctx.cancelled and can stop
        raise


def _error(exc: BaseException, timeout: float | None) -> ErrorInfo:
    if isinstance(exc, TimeoutError) and timeout is not None:
        return ErrorInfo(
            code="timeout",
            type="TimeoutError",
            message=f"attempt exceeded its timeout of {timeout:g}s",
        )
    code = exc.code if isinstance(exc, EffectOutcomeUnknownError) else "error"
    return ErrorInfo(code=code, type=type(exc).__name__, message=message_of(exc))


# Characters of an error message the log keeps: an exception carrying a whole response body
# made its failure event too big to store (over Firestore's 1 MiB), so the step's outcome
# was never recorded and the flow never saw it.
MAX_ERROR_MESSAGE = 8192


def message_of(exc: BaseException) -> str:
    """``str(exc)`` made safe to record: at most :data:`MAX_ERROR_MESSAGE` characters, and
    never an exception of its own (a ``__str__`` that raised escaped into the flow as if it
    were the effect's error, and the step's outcome was never recorded)."""
    try:
        text = str(exc)
    except Exception as inner:
        name, failed = type(exc).__name__, type(inner).__name__
        return f"(the message of this {name} cannot be read: str() raised {failed})"
    if len(text) <= MAX_ERROR_MESSAGE:
        return text
    return f"{text[:MAX_ERROR_MESSAGE]}… ({len(text) - MAX_ERROR_MESSAGE} characters more)"


# Called with the next attempt's context (its number in ``attempt``) and the last error.
BeforeRetry = Callable[[EffectContext, ErrorInfo | None], Awaitable[None]]


def _exhausted(policy: Retry, attempt: int) -> Outcome:
    error = ErrorInfo(
        code="retries_exhausted",
        type=None,
        message=f"attempt {attempt - 1} of {policy.max_attempts} was interrupted (its worker "
        "died) and no attempt is left",
    )
    return Outcome(None, error, 0, 0.0)


async def invoke_with_retry(
    defn: EffectDef,
    ectx: EffectContext,
    value: Any,
    clock: Callable[[], float],
    before_retry: BeforeRetry | None = None,
    max_inline_backoff: float = float("inf"),
    voided: int = 0,
) -> Outcome:
    """Invoke ``defn`` from attempt ``ectx.attempt`` up to its policy's last; never raises
    for effect errors. ``voided`` attempts (a ``not_performed`` verdict said they never ran)
    do not count against the policy.

    ``before_retry(ctx, error)`` runs before every attempt ``ctx.attempt >= 2`` (the session
    makes it durable), so a worker that dies mid-retry does not hand its successor a fresh
    budget.
    A backoff longer than ``max_inline_backoff`` is not waited for: the outcome carries
    ``retry_at`` and the caller schedules the next attempt durably.
    """
    first = ectx.attempt
    if first > defn.retry.max_attempts + voided:
        return _exhausted(defn.retry, first)
    started = time.perf_counter()
    if first >= 2 and before_retry is not None:  # a step resumed after its worker died
        await before_retry(ectx, None)
    try:
        with step_span(ectx):
            result = await _attempt(defn, ectx, value, clock)
        return _returned(result, 1, time.perf_counter() - started)
    except BaseException as exc:  # (what must unwind is raised again: ``attempt_failure``)
        failure = attempt_failure(exc, ectx)  # (retried outside: a later error has no context)
    return await retry_after(
        failure, started, defn, ectx, value, clock, before_retry, max_inline_backoff, voided
    )


async def retry_after(
    failure: BaseException,
    started: float,
    defn: EffectDef,
    ectx: EffectContext,
    value: Any,
    clock: Callable[[], float],
    before_retry: BeforeRetry | None = None,
    max_inline_backoff: float = float("inf"),
    voided: int = 0,
) -> Outcome:
    """The rest of :func:`invoke_with_retry` once attempt ``ectx.attempt`` (begun at
    ``started``, a ``time.perf_counter()``) raised ``failure``: the attempts left, up to the
    policy's last. (``loom.kernel.fast_step`` makes a first attempt itself and hands a failure over
    here.)"""
    policy, first = defn.retry, ectx.attempt
    n, exc = first, failure
    while True:
        error = _error(exc, defn.timeout)
        # An unknown outcome of a non-idempotent effect must not be tried again.
        final = isinstance(exc, policy.non_retryable) or (
            isinstance(exc, EffectOutcomeUnknownError) and not defn.idempotent
        )
        if final or n >= policy.max_attempts + voided:
            return Outcome(None, error, n - first + 1, time.perf_counter() - started)
        delay = backoff_delay(policy, n)
        if delay > max_inline_backoff:
            done = n - first + 1
            return Outcome(None, error, done, time.perf_counter() - started, clock() + delay)
        await asyncio.sleep(delay)
        n += 1
        attempt_ctx = replace(ectx, attempt=n, _cancelled=False)
        if before_retry is not None:
            await before_retry(attempt_ctx, error)
        try:
            with step_span(attempt_ctx):
                result = await _attempt(defn, attempt_ctx, value, clock)
            return _returned(result, n - first + 1, time.perf_counter() - started)
        except BaseException as again:
            exc = attempt_failure(again, attempt_ctx)


def attempt_failure(exc: BaseException, ectx: EffectContext) -> BaseException:
    """The error an attempt of the effect of ``ectx`` failed with, to record and retry.

    Any ``BaseException`` of the effect's own (``class Halt(BaseException)``, a group of
    errors) is its error like an ``Exception``: recorded with its type and message, retried
    per its policy. Let through, it failed the whole execution naming no effect and left a
    non-idempotent effect's intent open. Raises what must unwind instead: the engine's
    control-flow signals and ``GeneratorExit`` as they are, a cancel of the task running it
    (:func:`unrequested` tells it from a ``CancelledError`` the effect raised itself), and
    ``SystemExit``/``KeyboardInterrupt`` as an abort (asyncio would stop the whole loop with
    them, see :mod:`loom.kernel.exits`).
    """
    if isinstance(exc, Exception):
        return exc
    if isinstance(exc, asyncio.CancelledError):
        return unrequested(exc)
    if isinstance(exc, EXITS):
        raise exited(ectx, exc) from exc
    if isinstance(exc, _UNWINDS):
        raise exc
    if isinstance(exc, BaseExceptionGroup):
        return _group_failure(exc, ectx)  # pyright: ignore[reportUnknownArgumentType]
    return exc


# What an attempt lets through untouched: the engine's signals (a suspension, a park, a
# supersession…, all ``loom.kernel.context._Signal``) and a generator being closed.
_UNWINDS = (Signal, GeneratorExit)


def _group_failure(group: BaseExceptionGroup[BaseException], ectx: EffectContext) -> BaseException:
    """A group the effect raised, as its error, unless a member must unwind (a signal, an
    exit, a cancel of the task): then that decides, as it would have alone."""
    for kinds in (_UNWINDS, EXITS, asyncio.CancelledError):
        found = group.subgroup(kinds)
        if found is not None:
            first = _first_leaf(found)
            if isinstance(first, asyncio.CancelledError):
                task = asyncio.current_task()
                if task is None or task.cancelling():  # (as ``unrequested`` tells)
                    raise group
                continue
            if isinstance(first, EXITS):
                raise exited(ectx, first) from group
            raise group
    return group


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]
    return leaf  # pyright: ignore[reportUnknownVariableType]


def unrequested(exc: asyncio.CancelledError) -> Exception:
    """A ``CancelledError`` the effect raised though nothing cancelled the task running it
    (a library's own cancelled call), as the effect's error, to record and retry like any
    other; re-raised when the task was cancelled (a cancel, a timeout, a supersession).
    Let through, it ended the execute call with nothing recorded, reporting ``running``."""
    task = asyncio.current_task()
    if task is None or task.cancelling():
        raise exc
    return RuntimeError("the effect raised CancelledError though nothing cancelled it")


def exited(ectx: EffectContext, exc: BaseException) -> Signal:
    """The abort for ``SystemExit``/``KeyboardInterrupt`` raised by the effect of ``ectx``."""
    return exit_signal(exc, f"effect {ectx.effect!r} (step {ectx.step_id})")


def admit(defn: EffectDef, value: Any, granted: list[str]) -> tuple[Any, ErrorInfo | None]:
    """The input validated into the effect's declared type, or why the step must fail
    without invoking it (a missing capability, an input that fails its model)."""
    missing = defn.requires.difference(granted) if defn.requires else None
    if missing:
        message = f"effect {defn.name!r} requires {sorted(missing)}"
        return value, ErrorInfo(code="unauthorized", type="CapabilityError", message=message)
    try:
        return defn.typed.parse_input(value), None
    except InvalidPayloadError as exc:
        return value, ErrorInfo(code="invalid_input", type=type(exc).__name__, message=exc.message)


# Types whose values are JSON values as they are, so the serializer is skipped for them
# (a float still goes through it). Not ``loom.app``'s scalars: those are declared types.
_OWN_JSON = frozenset({int, str, bool, type(None)})


def _returned(result: Any, attempts: int, duration: float) -> Outcome:
    """The outcome of an attempt that returned. An output JSON cannot hold exactly
    (``inf``, ``NaN``, an object pydantic cannot serialize) fails the step for good with
    ``code="invalid_output"``: the effect ran, so it is not retried (a retry would repeat
    its side effects), and its output is never stored changed (``inf`` as ``null``)."""
    try:
        # A scalar is its own JSON form: no serializer call for the commonest outputs.
        value = result if type(result) in _OWN_JSON else to_json_value(result)
        raw = dump_exact(value, "the output")
    except Exception as exc:  # (any: the effect ran, so nothing raised here may retry it;
        # bytes that are not UTF-8 raise UnicodeDecodeError, a too deep value ValueError)
        message = exc.message if isinstance(exc, InvalidPayloadError) else message_of(exc)
        error = ErrorInfo(
            code="invalid_output",
            type=type(exc).__name__,
            message=f"the effect ran but its output cannot be recorded: {message}",
        )
        return Outcome(None, error, attempts, duration)
    return Outcome(value, None, attempts, duration, raw=raw)


def budget_exceeded(
    budgets: dict[str, float], meter: Meter, effect: str
) -> BudgetExceededError | None:
    """The budget an execution has used up before invoking ``effect``, if any."""
    if not budgets:  # the common case: nothing to check
        return None
    for name, used in (
        ("max_effect_calls", meter.effect_calls),
        ("max_attempts", meter.attempts),
        ("max_effect_seconds", meter.effect_seconds),
        ("max_bytes_stored", meter.bytes_stored),
    ):
        limit = budgets.get(name)
        if limit is not None and used >= limit:
            return BudgetExceededError(
                f"budget {name}={limit:g} exhausted ({used:g} used) before effect {effect!r}",
                details={"budget": name, "limit": limit, "used": used},
            )
    return None


def completed_event(
    step_id: str, effect: str, outcome: Outcome, stored: Any, size: int
) -> EffectCompleted:
    """The record of a step whose effect returned: its output as stored (``stored``, of
    ``size`` JSON bytes), attempts and duration. Built unvalidated (``unvalidated``): every
    value is the engine's own, the output checked by ``dump_exact`` when the effect returned.
    """
    values = {
        "schema_version": SCHEMA_VERSION,
        "seq": 0,
        "at": 0.0,
        "type": "EffectCompleted",
        "step_id": step_id,
        "effect": effect,
        "output": stored,
        "attempts": outcome.attempts,
        "duration_s": outcome.duration,
        "output_bytes": size,
    }
    return unvalidated(EffectCompleted, values, set(_COMPLETED_GIVEN))


_COMPLETED_GIVEN = frozenset(
    ("step_id", "effect", "output", "attempts", "duration_s", "output_bytes")
)


def failed_event(step_id: str, effect: str, outcome: Outcome, error: ErrorInfo) -> EffectFailed:
    """The record of a step whose effect failed for good (``error``), attempts and duration."""
    return EffectFailed(
        step_id=step_id,
        effect=effect,
        error=error,
        attempts=outcome.attempts,
        duration_s=outcome.duration,
    )


def error_info(exc: BaseException) -> ErrorInfo:
    """How a failure is recorded: its code, type and message."""
    code = exc.code if isinstance(exc, LoomError) else "flow_error"
    return ErrorInfo(code=code, type=type(exc).__name__, message=message_of(exc))
