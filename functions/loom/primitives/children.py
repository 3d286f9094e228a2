"""Child flows: ``ctx.execute_flow`` and ``ctx.start_flow``.

A child flow is an execution of its own, with its own log, claims and dispatches. Its id is
derived from the parent's id and the step that starts it (:func:`child_id`), so however
often the parent's step is replayed, and whenever its worker dies, one child exists. The
step, live:

1. creates the child's ``ExecutionStarted`` (with ``parent``); an existing one with the same
   parent is the same child (a replay after a crash);
2. dispatches it (dispatch id ``{child}:1``, which Cloud Tasks deduplicates);
3. records ``ChildStarted`` in the parent's log.

Waiting for the child is a gate on ``loom.child`` keyed by the child's id, at step
``{step}/child``. When the child ends (completed, failed, cancelled) its worker resumes
that gate through ``Runtime.resume``, whose check for ``loom.child`` reads
``{"status", "output", "error"}`` from the child's own log (so no route can forge it), and
which appends to the parent and dispatches it: the parent is woken by the normal dispatch path, never by
polling. The child's worker does this after every execute call that finds the child ended,
so a worker that died in between is made good by the redelivery (a duplicate resume is a
no-op). A failed or cancelled child raises :class:`~loom.errors.ChildFlowFailedError`.

When the parent ends, its children still running are cancelled (``on_cancel="cancel"``,
the default) or left alone (``"abandon"``); a parent whose wait on a child is cancelled
requests the child's cancel at once.

**Options** (``ctx.start_flow``/``ctx.execute_flow`` keywords, each recorded where it
governs): ``execution_id`` names the child instead of the derived id (a conflict is the
``ChildIdTakenError`` below; an id of a form the engine derives is refused, raised into the
flow before anything is written); ``timeout`` is the child's own execution timeout (its
``ExecutionStarted.deadline``, cancelled with cleanup past it); ``version`` pins the flow
version the child runs on for its whole life; ``queue`` starts it on a declared queue. A
replay serves the recorded child: an explicit id the code no longer gives (or another one)
parks the parent as nondeterministic, as a child of another flow does. An explicit id is
unique across runs of a parent that continued as new (the run is part of the recorded
parent), so run 2 starting the id run 1 started is told it is taken, never handed run 1's
child. The handle (:mod:`loom.primitives.child_handle`) cancels the child and sends it
messages.

The child's id is the engine's: an id of the child form (``{parent}.child.{step}``, the
step being numbers joined by dots) is refused to every outside start (HTTP, CLI, the
Python API, a fork) with :class:`~loom.errors.ReservedExecutionIdError` (HTTP 400). An
execution holding the id anyway (created before that rule, or written to the store by
hand) that is not this child (another parent, step or flow) makes the start fail in the
flow with :class:`~loom.errors.ChildIdTakenError` (``child_id_taken``), naming the holder's
flow and parent. The failure is recorded as the step's ``EffectFailed`` (effect
``loom.child:{flow}``), so a replay raises it again without looking at the store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from loom import events as ev
from loom.kernel.context import FlowContext, next_step_id
from loom.kernel.fold import ExecutionState
from loom.kernel.primitive import Primitive
from loom.primitives import child_sharing
from loom.primitives.child_ends import check_child_resume, follow_up
from loom.primitives.child_handle import CHILD_GATE, ChildFlow, cancel_requested_step
from loom.primitives.child_ids import child_id
from loom.primitives.child_options import ChildOptions, child_step_effect
from loom.primitives.child_starts import start_flow

if TYPE_CHECKING:
    from loom.primitives.queues import QueueRef

# The parts, each in its module: the start (loom.primitives.child_starts), the ends told
# across the family (loom.primitives.child_ends), the handle (loom.primitives.child_handle).
__all__ = [
    "CHILD_GATE",
    "PRIMITIVE",
    "ChildFlow",
    "ChildOptions",
    "ChildrenContext",
    "OnCancel",
    "check_child_resume",
    "child_id",
    "follow_up",
    "start_flow",
]

OnCancel = Literal["cancel", "abandon"]


# -- the fold -------------------------------------------------------------------------


def _child_started(s: ExecutionState, e: ev.ChildStarted) -> None:
    child = {"child_id": e.child_id, "flow": e.flow, "on_cancel": e.on_cancel}
    if e.explicit_id:
        child["explicit"] = "1"
    s.children[e.step_id] = child


def _child_step(s: ExecutionState, e: ev.ChildStarted) -> None:
    # A step record too, so an effect called where the log started a child diverges.
    s.steps[e.step_id] = {"effect": child_step_effect(e.flow), "status": "child"}


class ChildrenContext(FlowContext):
    """The ``ctx`` methods of child flows."""

    __slots__ = ()

    async def execute_flow(
        self,
        flow: str | Callable[..., Any],
        input: Any = None,
        *,
        on_cancel: str = "cancel",
        queue: QueueRef | None = None,
        execution_id: str | None = None,
        timeout: float | timedelta | None = None,
        version: str | int | None = None,
    ) -> Any:
        """Run ``flow`` as a child execution and return its output (the options: see
        :meth:`start_flow`).

        Raises:
            ChildFlowFailedError: The child failed or was cancelled.
            ChildIdTakenError: ``execution_id`` is held by another execution.
        """
        child = await self.start_flow(
            flow,
            input,
            on_cancel=on_cancel,
            queue=queue,
            execution_id=execution_id,
            timeout=timeout,
            version=version,
        )
        return await child.result()

    async def start_flow(
        self,
        flow: str | Callable[..., Any],
        input: Any = None,
        *,
        on_cancel: str = "cancel",
        queue: QueueRef | None = None,
        execution_id: str | None = None,
        timeout: float | timedelta | None = None,
        version: str | int | None = None,
    ) -> ChildFlow:
        """Start ``flow`` as a child execution; await the returned handle for its output,
        or cancel it or send it messages through it (:mod:`loom.primitives.child_handle`).

        Args:
            flow: The child's flow, by name or function.
            input: Its input.
            on_cancel: What this execution's end does to the child if it still runs,
                ``"cancel"`` it or ``"abandon"`` it.
            queue: The declared queue (and partition key) the child runs on.
            execution_id: The child's id (default: derived from this execution's id and
                the step, ``{parent}.child.{step}``).
            timeout: The child's execution timeout (default: its flow's): past it the
                child is cancelled, with cleanup.
            version: The version of ``flow`` the child runs on (default: the latest).

        Raises:
            ChildIdTakenError: ``execution_id`` is held by another execution (recorded).
            InvalidExecutionIdError: ``execution_id`` breaks the id rule or has a form the
                engine derives (nothing recorded).
            UnknownFlowError: No such flow or version.
        """
        sid = next_step_id(self)
        options = ChildOptions(on_cancel, queue, execution_id, timeout, version)
        return await start_flow(self._session, sid, flow, input, options)


def _has_family(state: ExecutionState) -> bool:
    return state.parent is not None or bool(state.children) or bool(state.shared_with)


PRIMITIVE = Primitive(
    "children",
    head={
        "ChildStarted": _child_started,
        "ChildShared": child_sharing.shared_with,
        "ExecutionForked": child_sharing.forked,
    },
    step={"ChildStarted": _child_step, "ChildCancelRequested": cancel_requested_step},
    context=ChildrenContext,
    resume_checks={CHILD_GATE: check_child_resume},
    follow_up=follow_up,
    follows_up=_has_family,
)
