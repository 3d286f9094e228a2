"""The events of a flow's steps: an effect's intent, attempts and outcome, its in-doubt
episodes and their verdicts, and the values (decisions, patch markers) replay serves from
the log.

Private: import these from :mod:`loom.events`, which builds the ``Event`` union of them
all and sets each class's ``__module__`` to ``loom.events``.
"""

from __future__ import annotations

from typing import Any, Literal

from loom._events.base import ErrorInfo, EventBase


class EffectStarted(EventBase):
    """The intent record, durable before a non-idempotent effect is invoked."""

    type: Literal["EffectStarted"] = "EffectStarted"
    step_id: str
    effect: str
    attempt: int = 1
    idempotency_key: str


class EffectCompleted(EventBase):
    """An effect returned; ``output`` is what every replay serves."""

    type: Literal["EffectCompleted"] = "EffectCompleted"
    step_id: str
    effect: str
    output: Any = None
    attempts: int = 1
    duration_s: float = 0.0
    output_bytes: int = 0


class EffectFailed(EventBase):
    """An effect failed for good; the error is raised into the flow."""

    type: Literal["EffectFailed"] = "EffectFailed"
    step_id: str
    effect: str
    error: ErrorInfo
    attempts: int = 0
    duration_s: float = 0.0


class EffectRetried(EventBase):
    """Attempt ``attempt`` (2 or more) of a step is about to start, after ``error``.

    Durable before the attempt runs, so attempt numbers and the retry budget count across
    crashes (a first attempt writes nothing: an idempotent step costs one write). With
    ``not_before`` the backoff was too long to wait for inside an execute call: the attempt
    is scheduled on a durable timer and recorded again when it starts.
    """

    type: Literal["EffectRetried"] = "EffectRetried"
    step_id: str
    effect: str
    attempt: int
    error: ErrorInfo | None = None
    not_before: float | None = None  # a durable backoff: the attempt waits for this time


class DecisionRecorded(EventBase):
    """A value the flow took from ``ctx.now/uuid/random``, served from the log on replay.

    ``kind="timer"`` is the deadline (epoch seconds) of a loop timer the flow created
    (``asyncio.sleep``, ``wait_for``, ``timeout``…; see :mod:`loom.kernel.loop_timers`).
    """

    type: Literal["DecisionRecorded"] = "DecisionRecorded"
    step_id: str
    kind: Literal["now", "uuid", "random", "timer"]
    value: Any


class PatchRecorded(EventBase):
    """The flow took the new branch of a change (``ctx.patched``/``ctx.deprecate_patch``).

    Keyed by ``change_id``, not by position: a marker never takes a step id, so histories
    recorded before the change keep their step ids. ``step_id`` is where the flow stood when
    it first asked (for reading the log); ``deprecated`` marks a marker written by
    ``deprecate_patch``.
    """

    type: Literal["PatchRecorded"] = "PatchRecorded"
    change_id: str
    step_id: str
    deprecated: bool = False


class EffectInDoubt(EventBase):
    """A rebuild found an intent record with no outcome: nobody knows if the effect ran."""

    type: Literal["EffectInDoubt"] = "EffectInDoubt"
    step_id: str
    effect: str


class EffectVerdict(EventBase):
    """An operator resolved an in-doubt effect.

    ``episode`` is the seq of the :class:`EffectInDoubt` this verdict settles (``None`` in
    version 1 events): a verdict answers one episode, never a later one of the same step.
    """

    type: Literal["EffectVerdict"] = "EffectVerdict"
    step_id: str
    verdict: Literal["performed", "not_performed", "failed"]
    output: Any = None
    error: ErrorInfo | None = None
    by: str = "operator"
    episode: int | None = None
