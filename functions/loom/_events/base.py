"""What every event shares: the schema version, the base model (``seq``, ``at``,
``schema_version``) and the models events hold (``ErrorInfo``, ``ForkOrigin``).

Private: import these from :mod:`loom.events`, which builds the ``Event`` union of them
all and sets each class's ``__module__`` to ``loom.events``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 4
"""Version 2 records who asked (``by`` on starts, resumes and cancels) and which in-doubt
episode a verdict settles (``episode``). Version 3 adds messages, published state and
continue-as-new (``MessageReceived``, ``MessageSent``, ``EventPublished``,
``ExecutionContinued``), cancellation with cleanup (``CancelRequested``,
``CancelDelivered``), child flows (``ChildStarted``, ``ExecutionStarted.parent``) and flow
timeouts (``ExecutionStarted.deadline``). Version 4 adds child handles and options
(``ChildCancelRequested``, ``ChildStarted.explicit_id``), children shared with a fork
(``ChildShared``), updates (``UpdateAccepted``, ``UpdateCompleted``), reads of another
execution's published values from a flow (``EventAwaited``, ``EventRead``) and streams
(``StreamWritten``, ``StreamClosed``), and queue options on a start (``queue_options``)
with its dequeue (``ExecutionDequeued``). Older events load unchanged: the new fields default
to ``None`` or ``False`` (nobody recorded, no parent, no deadline, an id the engine
derived)."""


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    seq: int = 0
    at: float = 0.0


class ForkOrigin(BaseModel):
    """Where a forked execution came from (``loom fork``; see :mod:`loom.ops.fork`).

    Attributes:
        execution_id: The execution forked (left untouched).
        step_id: The step the fork runs again from.
        seq: Where the copy was cut: events of the original before this seq were reused.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: str
    step_id: str
    seq: int


class ErrorInfo(BaseModel):
    """A failure as recorded: enough to re-raise it, typed, on every replay."""

    model_config = ConfigDict(frozen=True)

    code: str = "error"
    type: str | None = None
    message: str = ""


EventBase = _Event
"""The base of every event model, under a name its sibling modules may import."""
