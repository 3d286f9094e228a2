"""What ``run_until_blocked`` answers: why it stopped, and what it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from loom.commission.admission import Refusal
from loom.commission.errors import EffectError
from loom.commission.events import CaseState
from loom.commission.outcomes import ExecutorOutcome
from loom.events import ErrorInfo

StopReason = Literal[
    "needs_human",
    "suspended",
    "no_useful_action",
    "error",
    "in_doubt",
    "superseded",
    "not_assigned",
    "iteration_limit",
]


class RunReport(BaseModel):
    """Why ``run_until_blocked`` stopped, and what it did.

    Attributes:
        case_id: The case.
        reason: Why it stopped.
        message: A human-readable explanation.
        revision: The case revision when it stopped.
        iterations: Iterations run.
        outcome: The executor's last outcome in this run, if it was asked.
        invoked: Request ids, one entry per invocation of a port.
        performed: Request ids the port performed.
        refusals: Refusals recorded in this run.
        error: The error that stopped the run, if one did.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    reason: StopReason
    message: str
    revision: int
    iterations: int
    outcome: ExecutorOutcome | None = None
    invoked: tuple[str, ...] = ()
    performed: tuple[str, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    error: ErrorInfo | None = None


@dataclass(slots=True)
class RunLog:
    """What a run did so far; :meth:`stop` turns it into the report."""

    case: CaseState
    iterations: int = 0
    outcome: ExecutorOutcome | None = None
    invoked: list[str] = field(default_factory=list[str])
    performed: list[str] = field(default_factory=list[str])
    refusals: list[Refusal] = field(default_factory=list[Refusal])

    def stop(self, reason: StopReason, message: str, error: ErrorInfo | None = None) -> RunReport:
        """The report of a run that stops now."""
        return RunReport(
            case_id=self.case.case_id,
            reason=reason,
            message=message,
            revision=self.case.revision,
            iterations=self.iterations,
            outcome=self.outcome,
            invoked=tuple(self.invoked),
            performed=tuple(self.performed),
            refusals=tuple(self.refusals),
            error=error,
        )


def error_info(exc: BaseException) -> ErrorInfo:
    """An exception as the case and the report record it."""
    code = exc.reason if isinstance(exc, EffectError) else getattr(exc, "code", "error")
    return ErrorInfo(code=str(code), type=type(exc).__name__, message=str(exc))
