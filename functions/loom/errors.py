"""Every error Loom raises, under one root.

The tree::

    LoomError
    ├── InputError                     bad input from a caller; nothing was appended
    │   ├── UnknownFlowError           no flow registered under that name
    │   │   └── UnknownFlowVersionError  the flow, but not the version asked or recorded
    │   ├── UnknownEffectError         no effect registered under that name
    │   ├── UnknownExecutionError      no execution with that id
    │   ├── UnknownScheduleError       no schedule of that name (HTTP 404)
    │   ├── InvalidExecutionIdError    an id that breaks the one id rule (loom.ids)
    │   │   └── ReservedExecutionIdError  an outside start of an id of a form the engine
    │   │                                     derives (loom.reserved_ids)
    │   ├── ExecutionConflictError     same execution id, other flow or input
    │   ├── MessageConflictError       same message id, other topic or payload
    │   ├── QueueDeduplicatedError     a queue's deduplication id held by a queued or
    │   │                                  running execution (HTTP 409)
    │   ├── PayloadTooLargeError       a body or payload over the configured limit
    │   ├── InvalidPayloadError        input/output that fails its model
    │   ├── VerdictError               verdict for a step that is not in doubt
    │   │   └── StaleVerdictError      verdict for an episode already settled
    │   ├── NotPermittedError          a principal asked for what policy does not grant
    │   ├── NotParkedError             retry of an execution that is not parked
    │   ├── NotForkableError           fork from a step that cannot be reused (loom.ops.fork)
    │   ├── EventNotFoundError         no value published under that key (in time)
    │   ├── UpdateRejectedError        no such update handler, or its validator refused
    │   ├── UpdateConflictError        same update id, other name or arguments
    │   ├── UnknownUpdateError         no update with that id was accepted
    │   ├── UnknownQueryError          no query handler under that name
    │   ├── QueryFailedError           the query handler raised, or the replay could not
    │   │                              reach the flow's current point
    │   ├── LimitExceededError         an execution reached one of its limits (HTTP 409)
    │   │   └── MailboxFullError       a run holds as many messages as it may (HTTP 429)
    │   ├── NoOpenGateError            a strict resume that no open gate waits for
    │   ├── GateTimedOutError          a resume of a gate whose timeout already passed
    │   └── ExecutionFinishedError     the execution already ended
    ├── ConfigurationError             a bad store URL, app path, option
    │   └── MissingExtraError          a backend's library is not installed (names the extra)
    ├── StoreError                     the event store failed (HTTP 503, retry later)
    │   ├── StoreUnavailableError      busy, locked, disk full, read-only, cannot open
    │   ├── StoreLimitError            a write over a store limit (not retryable, HTTP 413)
    │   ├── AppendConflictError        the log did not end at expected_seq
    │   │   └── LogEndedError          the log already ends with a terminal event
    │   └── BlobNotFoundError          a claim-checked payload is missing
    ├── BlobRefError                   a logged blob reference outside its execution's blobs
    ├── ContextMisuseError             a ctx awaited outside the flow that owns it (also a
    │                                  RuntimeError)
    ├── ExecutionSupersededError       another holder owns the execution
    ├── NondeterminismError            replay diverged from the recorded history
    ├── EffectFailedError              an effect failed for good (raised into the flow)
    ├── ChildFlowFailedError           a child flow failed or was cancelled (into the parent)
    ├── ChildIdTakenError              a child's id is held by another execution (into the
    │                                  parent)
    ├── EffectOutcomeUnknownError      an effect cannot tell whether its side effect happened
    ├── GateTimeoutError               a gate's timeout passed before its resume
    │   └── MessageTimeoutError        ctx.recv's timeout passed before a message came
    ├── BudgetExceededError            an execution went over one of its budgets
    ├── UpdateFailedError              an update's handler raised, or the run ended first
    ├── UpdateTimeoutError             an update was not answered within the wait
    ├── StreamClosedError              a write to a stream the flow closed (into the flow)
    ├── FlowFailedError                the flow itself raised (recorded, terminal)
    ├── ExitRequestedError             flow or effect code raised SystemExit/KeyboardInterrupt
    └── WorkerError                    a worker answered with an error
        └── RemoteWorkerError          non-2xx from a remote worker (status, body)

Control-flow signals (suspension, supersession inside a running flow) are private
``BaseException`` subclasses in :mod:`loom.kernel.context`, so ``except Exception`` in user code
cannot swallow them.
"""

from __future__ import annotations

from typing import Any


class LoomError(Exception):
    """Root of every Loom error.

    Attributes:
        code: A short machine-readable code, used as the ``code`` of JSON error bodies.
        details: Extra JSON-able facts about the error.
    """

    code = "internal"

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}
        if code is not None:
            self.code = code  # a more precise code than the class's, for JSON error bodies

    def to_json(self) -> dict[str, Any]:
        """The JSON error body of every non-2xx answer: ``{"code", "message", "details"}``."""
        return {"code": self.code, "message": self.message, "details": self.details}


class InputError(LoomError):
    """Bad input from a caller. Nothing was appended."""

    code = "invalid_input"


class UnknownFlowError(InputError):
    """No flow is registered under the requested name."""

    code = "unknown_flow"


class UnknownFlowVersionError(UnknownFlowError):
    """The flow is registered, but not in the version asked for or recorded at its start.

    A worker raises it before writing anything when an execution started on a version its
    code no longer has; the execution stays as it was for a deployment that has it.
    """

    code = "unknown_flow_version"


class UnknownEffectError(InputError):
    """No effect is registered under the requested name."""

    code = "unknown_effect"


class UnknownExecutionError(InputError):
    """No execution exists with the requested id."""

    code = "unknown_execution"


class UnknownScheduleError(InputError):
    """No schedule of that name, declared or made at run time."""

    code = "unknown_schedule"


class InvalidExecutionIdError(InputError):
    """An execution or case id breaks the id rule of :mod:`loom.ids`. Nothing was written."""

    code = "invalid_execution_id"


class ReservedExecutionIdError(InvalidExecutionIdError):
    """An outside start (HTTP, Pub/Sub, CLI, Python API, fork) asked for an id of a form the
    engine derives (a child's, a run's, a schedule tick's, a re-drive's, a Pub/Sub start's,
    a signed request's: :mod:`loom.reserved_ids`), or the engine found such an id held by an
    execution it did not make. Nothing was written."""

    code = "reserved_execution_id"


class ExecutionConflictError(InputError):
    """An execution id is already used by another flow or another input."""

    code = "conflict"


class MessageConflictError(InputError):
    """A message id already delivered to the execution with another topic or payload.

    A repeat with the same topic and the same exact JSON payload is a no-op instead.
    """

    code = "conflicting_message"


class QueueDeduplicatedError(InputError):
    """A start on a queue with a deduplication id that another execution of the queue,
    still queued or running, holds (DBOS's ``DBOSQueueDeduplicatedError``). Nothing was
    started; ``details`` names the queue, the id and the execution holding it."""

    code = "queue_deduplicated"


class PayloadTooLargeError(InputError):
    """A request body or payload exceeds the configured limit."""

    code = "too_large"


class InvalidPayloadError(InputError):
    """An input, output or payload failed validation against its model."""

    code = "invalid_payload"


class VerdictError(InputError):
    """A verdict was given for a step that is not in doubt, or with a bad output."""

    code = "not_in_doubt"


class StaleVerdictError(VerdictError):
    """A verdict names an in-doubt episode that is not the open one (settled or replaced)."""

    code = "stale_verdict"


class NotPermittedError(InputError):
    """The caller asked for something policy does not grant it (a capability, a flow).

    Attributes:
        principal: Who asked.
    """

    code = "not_permitted"


class NotParkedError(InputError):
    """A retry was asked for an execution that is not parked (poison or nondeterminism)."""

    code = "not_parked"


class NotForkableError(InputError):
    """A fork was asked from a step that does not exist or whose prefix cannot be reused."""

    code = "not_forkable"


class LimitExceededError(InputError):
    """An execution reached one of its limits (events, runs, children: see
    :mod:`loom.kernel.execution_limits`), or a start asked for a limit that is not one. Nothing of
    the refused request was written; a flow that reaches a limit fails with this code."""

    code = "limit_exceeded"


class MailboxFullError(LimitExceededError):
    """The execution's run holds as many messages as it may: retry once it has read some
    (or continued as new). Nothing was written."""

    code = "mailbox_full"


class NoOpenGateError(InputError):
    """A strict resume (``loom resume --strict``) that no open gate waits for."""

    code = "no_open_gate"


class GateTimedOutError(InputError):
    """A resume (a reply) for a gate whose timeout already passed: the timeout won, the
    reply is refused (HTTP 409). ``details`` name the gate and when it timed out."""

    code = "gate_timed_out"


class ExecutionFinishedError(InputError):
    """The execution already ended; the request cannot apply to it."""

    code = "finished"


class ContextMisuseError(LoomError, RuntimeError):
    """A flow's ``ctx`` was used outside that flow: after it ended, from code that is not
    the flow's, or inside another execution's flow. Also a ``RuntimeError``, what it was
    before it had a name of its own."""

    code = "context_misuse"


class ConfigurationError(LoomError):
    """A bad store URL, app reference or option."""

    code = "configuration"


class MissingExtraError(ConfigurationError, ImportError):
    """A backend needs a library that only a pip extra installs; the message names it.

    Also an ``ImportError``, so code that tolerates a missing optional module still does.
    """

    code = "missing_extra"


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


class EventNotFoundError(InputError):
    """No value is published under the key asked for (not before the wait ended)."""

    code = "event_not_found"


class UpdateRejectedError(InputError):
    """An update was refused before anything was recorded: the flow has no handler under its
    name where it stands now (code ``unknown_update_handler``), the handler's validator
    raised (``update_rejected``, its message the validator's), or the execution is parked
    for an operator (``execution_parked``)."""

    code = "update_rejected"


class UpdateConflictError(InputError):
    """An update id already names another update (another handler or other arguments) of
    the execution. Nothing was written."""

    code = "conflicting_update"


class UnknownUpdateError(InputError):
    """No update with the id asked for was accepted by the execution (or it was, in a run
    before the one that ended last: those are forgotten)."""

    code = "unknown_update"


class UnknownQueryError(InputError):
    """The flow has no query handler under the name asked for, where it stands now."""

    code = "unknown_query"


class QueryFailedError(InputError):
    """A query could not be answered: its handler raised (its message is the handler's), or
    the flow's code could not be replayed to where the execution stands. Nothing was
    written."""

    code = "query_failed"


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
