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

The classes are defined by family in the private package ``loom._errors`` (bad input and
configuration; the running engine) and exported from here, the one import path: each class's
``__module__`` says ``loom.errors``, so pickles, tracebacks and reprs name it as they always
did.
"""

from __future__ import annotations

from loom._errors.input import (
    ConfigurationError,
    EventNotFoundError,
    ExecutionConflictError,
    ExecutionFinishedError,
    GateTimedOutError,
    InputError,
    InvalidExecutionIdError,
    InvalidPayloadError,
    LimitExceededError,
    LoomError,
    MailboxFullError,
    MessageConflictError,
    MissingExtraError,
    NoOpenGateError,
    NotForkableError,
    NotParkedError,
    NotPermittedError,
    PayloadTooLargeError,
    QueryFailedError,
    QueueDeduplicatedError,
    ReservedExecutionIdError,
    StaleVerdictError,
    UnknownEffectError,
    UnknownExecutionError,
    UnknownFlowError,
    UnknownFlowVersionError,
    UnknownQueryError,
    UnknownScheduleError,
    UnknownUpdateError,
    UpdateConflictError,
    UpdateRejectedError,
    VerdictError,
)
from loom._errors.runtime import (
    AppendConflictError,
    BlobNotFoundError,
    BlobRefError,
    BudgetExceededError,
    ChildFlowFailedError,
    ChildIdTakenError,
    ContextMisuseError,
    EffectFailedError,
    EffectOutcomeUnknownError,
    ExecutionSupersededError,
    ExitRequestedError,
    FlowFailedError,
    GateTimeoutError,
    LogEndedError,
    MessageTimeoutError,
    NondeterminismError,
    RemoteWorkerError,
    StoreError,
    StoreLimitError,
    StoreUnavailableError,
    StreamClosedError,
    UpdateFailedError,
    UpdateTimeoutError,
    WorkerError,
    failed_error,
)

__all__ = [  # noqa: RUF022 - in source order, the order the API reference lists them in
    "LoomError",
    "InputError",
    "UnknownFlowError",
    "UnknownFlowVersionError",
    "UnknownEffectError",
    "UnknownExecutionError",
    "UnknownScheduleError",
    "InvalidExecutionIdError",
    "ReservedExecutionIdError",
    "ExecutionConflictError",
    "MessageConflictError",
    "QueueDeduplicatedError",
    "PayloadTooLargeError",
    "InvalidPayloadError",
    "VerdictError",
    "StaleVerdictError",
    "NotPermittedError",
    "NotParkedError",
    "NotForkableError",
    "LimitExceededError",
    "MailboxFullError",
    "NoOpenGateError",
    "GateTimedOutError",
    "ExecutionFinishedError",
    "ContextMisuseError",
    "ConfigurationError",
    "MissingExtraError",
    "StoreError",
    "StoreUnavailableError",
    "StoreLimitError",
    "AppendConflictError",
    "LogEndedError",
    "BlobNotFoundError",
    "BlobRefError",
    "ExecutionSupersededError",
    "NondeterminismError",
    "ChildFlowFailedError",
    "ChildIdTakenError",
    "EffectFailedError",
    "EffectOutcomeUnknownError",
    "GateTimeoutError",
    "MessageTimeoutError",
    "EventNotFoundError",
    "UpdateRejectedError",
    "UpdateConflictError",
    "UnknownUpdateError",
    "UnknownQueryError",
    "QueryFailedError",
    "UpdateFailedError",
    "UpdateTimeoutError",
    "StreamClosedError",
    "BudgetExceededError",
    "FlowFailedError",
    "ExitRequestedError",
    "WorkerError",
    "RemoteWorkerError",
    "failed_error",
]

for _kind in (
    LoomError,
    InputError,
    UnknownFlowError,
    UnknownFlowVersionError,
    UnknownEffectError,
    UnknownExecutionError,
    UnknownScheduleError,
    InvalidExecutionIdError,
    ReservedExecutionIdError,
    ExecutionConflictError,
    MessageConflictError,
    QueueDeduplicatedError,
    PayloadTooLargeError,
    InvalidPayloadError,
    VerdictError,
    StaleVerdictError,
    NotPermittedError,
    NotParkedError,
    NotForkableError,
    EventNotFoundError,
    UpdateRejectedError,
    UpdateConflictError,
    UnknownUpdateError,
    UnknownQueryError,
    QueryFailedError,
    LimitExceededError,
    MailboxFullError,
    NoOpenGateError,
    GateTimedOutError,
    ExecutionFinishedError,
    ConfigurationError,
    MissingExtraError,
    ContextMisuseError,
    StoreError,
    StoreUnavailableError,
    StoreLimitError,
    AppendConflictError,
    LogEndedError,
    BlobNotFoundError,
    BlobRefError,
    ExecutionSupersededError,
    NondeterminismError,
    ChildFlowFailedError,
    ChildIdTakenError,
    EffectFailedError,
    EffectOutcomeUnknownError,
    GateTimeoutError,
    MessageTimeoutError,
    UpdateFailedError,
    UpdateTimeoutError,
    StreamClosedError,
    BudgetExceededError,
    FlowFailedError,
    ExitRequestedError,
    WorkerError,
    RemoteWorkerError,
):
    _kind.__module__ = __name__  # the public path, which pickle and tracebacks use
failed_error.__module__ = __name__
del _kind
