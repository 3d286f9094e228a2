"""A repeated start: the same execution id asked for again (at-least-once start).

A start appends ``ExecutionStarted`` and then dispatches the execution. A process that dies
between the two, or a dispatch that fails, leaves an execution nobody runs; the caller (a
client retrying, Pub/Sub redelivering, Cloud Tasks retrying a 503) then asks again. So a
repeat with the same flow and input dispatches an execution whose log is still its start
alone, under the first start's dispatch id (a dispatcher that already holds that id treats
it as done). A repeat with another flow or input is refused; one that finds the execution
under way or ended only reports where it stands.
"""

from __future__ import annotations

from loom import events as ev
from loom.errors import ExecutionConflictError
from loom.fold import ExecutionState


def check_same_start(first: ev.ExecutionStarted, started: ev.ExecutionStarted) -> None:
    """Refuse a repeated start that differs from the stored one.

    Raises:
        ExecutionConflictError: Another flow, input, capabilities or budgets.
    """
    mine = (started.flow, started.input, started.capabilities, started.budgets)
    theirs = (first.flow, first.input, first.capabilities, first.budgets)
    if mine != theirs:
        raise ExecutionConflictError(
            f"execution {started.execution_id!r} exists with flow {first.flow!r} and "
            "another input; use a new execution id",
            details={"execution_id": started.execution_id, "flow": first.flow},
        )


def never_ran(state: ExecutionState) -> bool:
    """Whether the log holds the start alone: created, never claimed by a worker."""
    return state.status == "running" and state.last_seq == 1
