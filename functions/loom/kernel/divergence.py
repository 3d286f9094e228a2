"""A replay that skips a recorded step: the flow asks for a new step while the log holds a
step this replay never asked for.

Step ids are positions in the flow's task tree (``"3"``, ``"2.1"``), so the same flow code
numbers its steps differently when what creates tasks under it changes. It happens without
anyone touching the flow: ``asyncio.wait_for(ctx.execute(...), t)`` runs the step in a task
of its own on Python 3.11 (step ``"1.1"``) and in the flow's own task from Python 3.12 on
(step ``"1"``); executions recorded before Loom numbered that step alike on every Python
(:mod:`loom.kernel.context`) keep the numbering of the Python that recorded them. A session that then found no record of the step it was asked for would
invoke the effect again under a new key: a non-idempotent effect would run twice.

A flow running one task at a time asks for its recorded steps in the order it made them, so
the first request for a step the log does not hold comes after every recorded one was asked
for. If one was not, the replay diverged: the session parks the execution with
``NondeterminismError`` naming both steps, and nothing is invoked. While several of the
flow's tasks are open the check is off: a live step of one task may start before another
task reaches its recorded one. Nor is it a divergence when every step not asked for was
recorded after the firing of a loop timer still open (an ``asyncio.wait_for`` or
``asyncio.timeout`` around the step asked for): live, that firing cut the step short and
the flow went on without it, so its outcome may be missing from the log (a fork cut before
it landed, a crash).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loom.kernel.fold import ExecutionState, StepRecord


_OWN = "loom."  # the prefix of the engine's own step records (children, messages, events)


def visit(session: object, step_id: str) -> None:
    """Count ``step_id`` as reached for the pre-deploy replay check (``loom.ops.replay_check``
    gives its sessions a ``visited`` set): for the engine's own steps (a child start, a
    send), which it cannot see through an effect call."""
    visited: object = getattr(session, "visited", None)
    if isinstance(visited, set):
        visited.add(step_id)  # pyright: ignore[reportUnknownMemberType]


class StepTally:
    """Which of the steps recorded before a session began its replay has asked for.

    Args:
        state: The execution's state when the session began.
    """

    __slots__ = ("asked", "recorded", "start_seq")

    def __init__(self, state: ExecutionState) -> None:
        self.start_seq = state.last_seq  # steps at or before it were recorded before
        self.recorded: int | None = None  # counted at the first request (steps load lazily)
        self.asked: set[str] = set()

    def saw(self, step_id: str, rec: StepRecord) -> None:
        """The flow asked for ``step_id``, which the log holds as ``rec``."""
        if rec.get("seq", 0) <= self.start_seq and not rec.get("effect", "").startswith(_OWN):
            self.asked.add(step_id)

    def skipped(
        self, state: ExecutionState, step_id: str, open_tasks: int, cut: float | None = None
    ) -> str | None:
        """Why asking for ``step_id``, which the log does not hold, diverges from the log;
        ``None`` when it does not (or cannot be told: several tasks are open, or every step
        not asked for comes after ``cut``, the recorded firing of an open loop timer)."""
        if self.recorded is None:
            self.recorded = sum(1 for _ in self._effect_steps(state))
        if self.recorded <= len(self.asked) or open_tasks > 1:
            return None
        seq, missed = min(
            (r.get("seq", 0), sid) for sid, r in self._effect_steps(state) if sid not in self.asked
        )
        if cut is not None and seq > cut:
            return None
        rec = state.steps[missed]
        return (
            f"step {step_id}: the flow asked for a step the log does not hold, but never for "
            f"step {missed} (effect {rec.get('effect')!r}, {rec.get('status')}) recorded "
            "before it; the flow numbers its steps differently than when they were recorded "
            "(a changed flow, or a Python or library version that creates tasks differently: "
            "an execution recorded before step ids were the same on every Python, where "
            "asyncio.wait_for ran its awaitable in a task of its own on Python 3.11 only)"
        )

    def _effect_steps(self, state: ExecutionState) -> Iterator[tuple[str, StepRecord]]:
        """The effect steps recorded before the session began. The engine's own step records
        (a child start, a message sent, a published event: ``loom.``-named) are served by
        their primitives, not by ``execute``, so they are never asked for here."""
        for sid, rec in state.steps.items():
            if rec.get("seq", 0) <= self.start_seq and not rec.get("effect", "").startswith(_OWN):
                yield sid, rec
