"""The invocation of the commonest step, without the general path's detours.

Nearly every step a flow runs is alike: the first attempt of an idempotent ``async``
effect with no timeout, in an execution with no budget and no tracer, and the attempt
returns a small JSON value. ``Session._invoke`` and
``invoke_with_retry`` pay on every step for what a step *could* be (an intent record, a
budget, a resumed attempt, a timeout, a span, a retry loop): a coroutine and some ten calls
that do nothing here, a good share of a step's cost on the engine's hot path.

:func:`invoke` does what that path does for this case, in one coroutine: the same crash
points, events, checks and order (the tests in ``tests/core/test_fast_step.py`` run both
paths and compare). :func:`applies` decides before anything happens; a step it refuses
takes the general path. An uncommon turn once the step is under way hands over to the code
the general path runs from that point on, so each outcome has one implementation: a refused
input (``Session._refuse``), a failed first attempt (``effects.retry_after``), an output
that is refused or offloaded (``Session._record``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from loom import crash, telemetry
from loom.kernel.context import EffectContext
from loom.kernel.effects import _returned, admit, attempt_failure, completed_event, retry_after  # pyright: ignore[reportPrivateUsage]

if TYPE_CHECKING:
    from loom.kernel.defs import EffectDef
    from loom.kernel.steps import EffectSteps


def applies(session: EffectSteps, defn: EffectDef, attempt: int) -> bool:
    """Whether attempt ``attempt`` of a step of ``defn`` may take :func:`invoke`."""
    return (
        attempt == 1  # (a later attempt is made durable first: ``before_retry``)
        and defn.idempotent  # (no intent record, and no ``in_doubt`` outcome)
        and defn.is_async  # (a sync effect runs in a thread)
        and defn.timeout is None
        and not session.journal.state.budgets
        and session.journal.state.last_seq < session.max_events  # (full: the slow path stops)
        and not telemetry._tracing_on  # (no step span; ``tracing_on()`` without its call)  # pyright: ignore[reportPrivateUsage]
    )


async def invoke(session: EffectSteps, step_id: str, defn: EffectDef, value: Any) -> Any:
    """``Session._invoke(step_id, defn, value, 1)`` for a step :func:`applies` to."""
    state = session.journal.state
    key = state.step_key(step_id)
    value, refused = admit(defn, value, state.capabilities)
    if refused is not None:
        await session._refuse(step_id, defn, refused)  # pyright: ignore[reportPrivateUsage]
    if crash.ARMED:  # (a call only where a test armed a crash point)
        crash.point("before_intent", step_id)
    ectx = EffectContext(session.execution_id, step_id, key, 1, defn.name)
    started = time.perf_counter()
    try:  # (``invoke_with_retry``'s first attempt, as ``_attempt`` makes it here)
        outcome = _returned(await defn.fn(ectx, value), 1, time.perf_counter() - started)
    except BaseException as exc:  # (what must unwind is raised again: ``attempt_failure``)
        outcome = attempt_failure(exc, ectx)  # (retried outside: a later error has no context)
    if isinstance(outcome, BaseException):
        rt = session.rt
        before_retry = session._retrying  # pyright: ignore[reportPrivateUsage]
        outcome = await retry_after(
            outcome, started, defn, ectx, value, rt.clock, before_retry, rt.max_inline_backoff
        )
    if crash.ARMED:
        crash.point("after_effect", step_id)
    stored = (
        None
        if outcome.error is not None
        else session.rt.payloads.inline(outcome.value, outcome.raw)
    )
    if stored is None:  # failed, or an output to offload: recorded as the general path does
        return await session._record(step_id, defn, 1, outcome)  # pyright: ignore[reportPrivateUsage]
    event = completed_event(step_id, defn.name, outcome, *stored)
    journal = session.journal
    held = journal.hold(event)  # (a strict journal holds it, the held crash point passed)
    if not held:
        await session.append([event], defer=held is False)  # (None: it would not be held)
        journal.completed(step_id)  # the after_complete crash point (loom.kernel.durability)
    return defn.typed.parse_output(outcome.value)
