"""What makes two starts of one execution id the same start (a repeat, not a conflict)."""

from __future__ import annotations

from loom import events as ev
from loom.errors import ExecutionConflictError


def check_same_start(first: ev.ExecutionStarted, started: ev.ExecutionStarted) -> None:
    """Accept ``started`` as a repeat of the stored ``first``, or refuse it.

    Raises:
        ExecutionConflictError: The id exists with another flow, input, capabilities or
            budgets.
    """
    mine = (started.flow, started.input, started.capabilities, started.budgets)
    theirs = (first.flow, first.input, first.capabilities, first.budgets)
    if mine != theirs:
        raise ExecutionConflictError(
            f"execution {started.execution_id!r} exists with flow {first.flow!r} and "
            "another input; use a new execution id",
            details={"execution_id": started.execution_id, "flow": first.flow},
        )
