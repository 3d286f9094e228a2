"""The errors of a running engine: the store failing, a flow's steps failing (raised into the
flow), replay diverging, a worker answering with an error.

Private: import these from :mod:`loom.errors`, which draws the whole tree and sets each class's
``__module__`` to ``loom.errors``.
"""

from __future__ import annotations

from typing import Any

from loom._errors.input import LoomError


class ContextMisuseError(LoomError, RuntimeError):
    """A flow's ``ctx`` was used outside that flow: after it ended, from code that is not
    the flow's, or inside another execution's flow. Also a ``RuntimeError``, what it was
    before it had a name of its own."""

    code = "context_misuse"


class StoreError(LoomError):
    """The event store failed."""

    code = "store"


class StoreUnavailableError(StoreError):
    """The store cannot answer now: locked or busy past the timeout, disk full, read-only,
    or the database cannot be opened. Nothing was written; the same call may succeed later.

    ``details["reason"]`` names which: ``busy``, ``disk_full``, ``read_only``,
    ``cannot_open``, ``io`` or ``timeout``.
    """

    code = "store_unavailable"


class StoreLimitError(StoreError):
    """A write over one of the store's limits (Firestore: 500 writes or about 10 MiB per
    commit, 1 MiB per document; SQLite: the configured largest event). Refused before
    anything was written, and not retryable: the same write fails the same way.

    A worker records the step the write was about as failed with this code (or the
    execution, for a result); a caller's own payload over the limit gets HTTP 413.
    ``details`` names the ``limit``, its ``max`` and the ``size`` asked for.
    """

    code = "store_limit"


class AppendConflictError(StoreError):
    """The log did not end at the expected sequence number; nothing was written."""

    code = "append_conflict"


class LogEndedError(AppendConflictError):
    """The log already ends with a terminal event; nothing may follow, nothing was written.

    A conflict like any other to its callers: they reload, find the execution finished, and
    decide again (a writer that decided from an older state learns it ended meanwhile).
    """

    code = "log_ended"


class BlobNotFoundError(StoreError):
    """A payload stored by reference (claim check) is missing from the blob store."""

    code = "blob_not_found"


class BlobRefError(LoomError):
    """A stored blob reference names a blob outside its execution's own, or no blob at all.

    Engine-made references are unforgeable from user data, so this means a log written or
    edited by something other than the engine: not retryable, and nothing is read.
    """

    code = "blob_ref_refused"


class ExecutionSupersededError(LoomError):
    """Another holder owns the execution, or overtook this one. Nothing more was invoked."""

    code = "superseded"


class NondeterminismError(LoomError):
    """Replay reached a recorded step that does not match the flow's call at that position."""

    code = "nondeterminism"


class ChildFlowFailedError(LoomError):
    """A child flow ended ``failed`` or ``cancelled``; raised into its parent's flow.

    Attributes:
        child_id: The child execution's id.
        flow: The child's flow.
        status: ``failed`` or ``cancelled``.
        error: The child's recorded error (``code``, ``type``, ``message``).
    """

    code = "child_flow_failed"

    def __init__(
        self, message: str, *, child_id: str, flow: str, status: str, error: dict[str, Any]
    ) -> None:
        super().__init__(
            message,
            details={"child_id": child_id, "flow": flow, "status": status, "error": error},
        )
        self.child_id, self.flow, self.status, self.error = child_id, flow, status, error


class ChildIdTakenError(LoomError):
    """The id a child flow start would give its child is held by another execution (of
    another parent, or another flow); raised into the parent's flow, which may catch it.
    Recorded in the parent's log, so every replay raises it again.

    Attributes:
        child_id: The id asked for.
        holder_flow: The flow of the execution holding it.
        holder_parent: The parent execution id of the holder (None: started from outside).
    """

    code = "child_id_taken"

    def __init__(
        self, message: str, *, child_id: str, holder_flow: str, holder_parent: str | None
    ) -> None:
        super().__init__(
            message,
            details={
                "child_id": child_id,
                "holder_flow": holder_flow,
                "holder_parent": holder_parent,
            },
        )
        self.child_id, self.holder_flow, self.holder_parent = child_id, holder_flow, holder_parent


class EffectFailedError(LoomError):
    """An effect failed for good: retries exhausted, not retryable, or not authorized.

    Raised into the flow, which may catch it.

    Attributes:
        effect: The effect's registered name.
        step_id: The step that failed.
        error_code: ``error`` (the effect raised), ``timeout``, ``unauthorized``,
            ``budget``, ``verdict`` (an operator said it failed), ``invalid_output`` or
            ``output_too_large`` (it returned a value the log cannot record).
        error_type: The class name of the original exception, when there was one.
    """

    code = "effect_failed"

    def __init__(
        self,
        message: str,
        *,
        effect: str,
        step_id: str,
        error_code: str = "error",
        error_type: str | None = None,
    ) -> None:
        super().__init__(
            message,
            details={
                "effect": effect,
                "step_id": step_id,
                "error_code": error_code,
                "error_type": error_type,
            },
        )
        self.effect = effect
        self.step_id = step_id
        self.error_code = error_code
        self.error_type = error_type


class EffectOutcomeUnknownError(LoomError):
    """Raised *by an effect* that cannot tell whether its side effect happened.

    For a non-idempotent effect the step is then parked in doubt for an operator verdict,
    exactly as after a crash mid-call: never retried, never recorded as failed. For an
    idempotent effect it is an ordinary retryable error (running it again is safe).
    """

    code = "outcome_unknown"


class GateTimeoutError(LoomError):
    """A gate's timeout passed before a matching resume arrived."""

    code = "gate_timeout"


class MessageTimeoutError(GateTimeoutError):
    """``ctx.recv``'s timeout passed before a message on its topic arrived."""

    code = "recv_timeout"


class UpdateFailedError(LoomError):
    """An accepted update has no value to return: its handler raised (recorded: every
    caller of that update id gets the same error), or the execution ended, or continued as
    new, before the handler returned.

    Attributes:
        update_id: The update.
        error: The recorded error (``code``, ``type``, ``message``).
    """

    code = "update_failed"

    def __init__(self, message: str, *, update_id: str, error: dict[str, Any]) -> None:
        super().__init__(message, details={"update_id": update_id, "error": error})
        self.update_id, self.error = update_id, error


class UpdateTimeoutError(LoomError):
    """The wait for an accepted update's answer ended first; the update stays accepted and
    its answer can be awaited again under its ``update_id``."""

    code = "update_timeout"


class StreamClosedError(LoomError):
    """The flow wrote to a stream it had closed."""

    code = "stream_closed"


class BudgetExceededError(LoomError):
    """An execution exceeded one of its budgets."""

    code = "budget_exceeded"


class FlowFailedError(LoomError):
    """The flow raised; the execution failed for good."""

    code = "flow_failed"


class ExitRequestedError(LoomError):
    """Flow or effect code raised ``SystemExit`` or ``KeyboardInterrupt`` in an execute
    call. The call stopped there as if its worker had died: nothing more was recorded, and
    the next execute call carries on from the log (a non-idempotent effect that was
    running parks in doubt). The process and its event loop keep serving."""

    code = "exit_requested"


class WorkerError(LoomError):
    """A worker could not run an execution."""

    code = "worker"


class RemoteWorkerError(WorkerError):
    """A remote worker answered with a non-2xx status.

    Attributes:
        status: The HTTP status code.
        body: The response body as text.
    """

    code = "remote_worker"

    def __init__(self, message: str, *, status: int, body: str) -> None:
        super().__init__(message, details={"status": status, "body": body[:2000]})
        self.status = status
        self.body = body


def failed_error(effect: str, step_id: str, error: dict[str, Any]) -> EffectFailedError:
    """The typed error a flow receives for a recorded effect failure."""
    return EffectFailedError(
        f"effect {effect!r} failed at step {step_id}: {error.get('message', '')}",
        effect=effect,
        step_id=step_id,
        error_code=error.get("code", "error"),
        error_type=error.get("type"),
    )
