"""Invoking an effect: retries with backoff and jitter, a timeout per attempt, cancellation.

Every attempt carries the same idempotency key. The outcome is returned, not raised, so the
session records exactly one ``EffectCompleted`` or ``EffectFailed`` per step.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loom.app import EffectDef, Retry, call_effect, to_json_value
from loom.context import EffectContext
from loom.context import _Signal as Signal  # pyright: ignore[reportPrivateUsage]
from loom.errors import (
    BudgetExceededError,
    EffectFailedError,
    EffectOutcomeUnknownError,
    LoomError,
)
from loom.events import ErrorInfo
from loom.fold import Meter


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an invocation came to: a JSON-able value or an error, and what it cost."""

    value: Any
    error: ErrorInfo | None
    attempts: int
    duration: float


def backoff_delay(policy: Retry, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed ``attempt`` (1-based), with jitter."""
    base = min(policy.initial_interval * policy.backoff ** (attempt - 1), policy.max_interval)
    spread = base * policy.jitter
    return max(0.0, base + (rng or random).uniform(-spread, spread))


async def _attempt(
    defn: EffectDef, ectx: EffectContext, value: Any, clock: Callable[[], float]
) -> Any:
    if defn.timeout is None:
        return await call_effect(defn, ectx, value)
    ectx.deadline = clock() + defn.timeout
    try:
        async with asyncio.timeout(defn.timeout):
            return await call_effect(defn, ectx, value)
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
    return ErrorInfo(code=code, type=type(exc).__name__, message=str(exc))


async def invoke_with_retry(
    defn: EffectDef, ectx: EffectContext, value: Any, clock: Callable[[], float]
) -> Outcome:
    """Invoke ``defn`` up to its retry policy's attempts; never raises for effect errors."""
    policy = defn.retry
    started = time.perf_counter()
    error = ErrorInfo()
    for n in range(1, policy.max_attempts + 1):
        attempt_ctx = (
            ectx if n == 1 else replace(ectx, attempt=ectx.attempt + n - 1, _cancelled=False)
        )
        try:
            result = await _attempt(defn, attempt_ctx, value, clock)
            return Outcome(to_json_value(result), None, n, time.perf_counter() - started)
        except (Signal, asyncio.CancelledError):
            raise
        except Exception as exc:
            error = _error(exc, defn.timeout)
            # An unknown outcome of a non-idempotent effect must not be tried again.
            final = isinstance(exc, policy.non_retryable) or (
                isinstance(exc, EffectOutcomeUnknownError) and not defn.idempotent
            )
            if final or n == policy.max_attempts:
                return Outcome(None, error, n, time.perf_counter() - started)
        await asyncio.sleep(backoff_delay(policy, n))
    return Outcome(None, error, policy.max_attempts, time.perf_counter() - started)


def budget_exceeded(
    budgets: dict[str, float], meter: Meter, effect: str
) -> BudgetExceededError | None:
    """The budget an execution has used up before invoking ``effect``, if any."""
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


def error_info(exc: BaseException) -> ErrorInfo:
    """How a failure is recorded: its code, type and message."""
    code = exc.code if isinstance(exc, LoomError) else "flow_error"
    return ErrorInfo(code=code, type=type(exc).__name__, message=str(exc))


def failed_error(effect: str, step_id: str, error: dict[str, Any]) -> EffectFailedError:
    """The typed error a flow receives for a recorded effect failure."""
    return EffectFailedError(
        f"effect {effect!r} failed at step {step_id}: {error.get('message', '')}",
        effect=effect,
        step_id=step_id,
        error_code=error.get("code", "error"),
        error_type=error.get("type"),
    )
