"""The root of Loom's errors and the errors of bad input: what a caller asked for that
cannot be done (``InputError`` and its subclasses, nothing appended) or a bad configuration.

Private: import these from :mod:`loom.errors`, which draws the whole tree and sets each class's
``__module__`` to ``loom.errors``.
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


class ConfigurationError(LoomError):
    """A bad store URL, app reference or option."""

    code = "configuration"


class MissingExtraError(ConfigurationError, ImportError):
    """A backend needs a library that only a pip extra installs; the message names it.

    Also an ``ImportError``, so code that tolerates a missing optional module still does.
    """

    code = "missing_extra"
