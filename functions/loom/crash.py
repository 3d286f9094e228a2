"""Crash points for the delivery-contract tests: ``LOOM_CRASH_AT=point[:step_id]``.

A test process sets the variable, and the worker kills itself with SIGKILL when it reaches
that point — a real process death, not an exception a ``finally`` could tidy up after. Unset
(always, in production) the check is one global lookup; the points every step passes test
:data:`ARMED` inline first (``if crash.ARMED: crash.point(...)``), not even a call.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "after_start",
    "before_intent",
    "after_intent",
    "after_effect",
    "held",
    "after_complete",
    "before_reply",
)
# ``held``: a strict session holds the step's completion, not yet durable (loom.kernel.durability);
# ``after_complete``: the completion is appended (durable, unless a batched session keeps
# it unforced).
# Child flow points: numbered by the parent's step, the child exists, then it was
# dispatched, and the parent has not recorded ``ChildStarted`` yet; ``child_ended``: a child
# reached its end and its parent has not been told; ``child_cancel_requested``: a cancel
# through the handle is in the child's log, not yet recorded in the parent's.
CHILD_POINTS = ("child_created", "child_dispatched", "child_ended", "child_cancel_requested")
# A fork (loom.ops.fork): created and parked, its prefix not copied yet; copied, the children
# it shares not yet told of it.
FORK_POINTS = ("fork_created", "fork_copied")
# A bulk operation (loom.ops.bulk), numbered by execution: the n-th acted on, the next not.
BULK_POINTS = ("bulk_applied",)
# Points of a flow's ``ctx.send`` (loom.primitives.messages), numbered by the sending step.
MESSAGE_POINTS = ("before_send", "after_send", "after_sent")
# ``ctx.continue_as_new`` (loom.primitives.continuation): the next run appended, not yet dispatched.
CONTINUE_POINTS = ("after_continue",)
# Updates (loom.primitives.update_calls, loom.primitives.updates), numbered by update id: the
# acceptance durable and nothing dispatched; the handler returned and its answer not yet
# appended; appended and the call not yet ended.
UPDATE_POINTS = ("after_update_accepted", "before_update_completed", "after_update_completed")
# ``ctx.get_event`` (loom.primitives.event_reads), numbered by step: the wait's deadline
# recorded, the worker waiting; what it read recorded. ``ctx.write_stream``
# (loom.primitives.streams): the value appended.
EVENT_READ_POINTS = ("after_event_awaited", "after_event_read")
STREAM_POINTS = ("after_stream_written",)
# A queued start's deduplication id held (loom.primitives.queue_options), its start not
# written yet.
QUEUE_POINTS = ("after_dedup_held",)
# Store points, numbered by transaction instead of step: ``in_group_commit:3`` dies in the
# third SQLite group transaction after its statements ran, before its ``COMMIT``.
STORE_POINTS = ("in_group_commit",)

_spec = os.environ.get("LOOM_CRASH_AT", "")
_POINT, _, _STEP = _spec.partition(":")
ARMED = bool(_POINT)
"""Whether a crash point is configured in this process (read once, at import)."""


def point(name: str, step_id: str | None = None) -> None:
    """Die here if this is the configured crash point (and step)."""
    if _POINT and name == _POINT and (not _STEP or step_id == _STEP):
        os.kill(os.getpid(), signal.SIGKILL)
