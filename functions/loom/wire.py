"""The wire contract between dispatchers and workers: ``ExecutionPackage`` in,
``ExecutionResult`` out. Both round-trip through JSON unchanged, so a remote worker's answer
compares equal to an in-process one modulo ids and timestamps.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from loom.fold import ExecutionState
from loom.ids import ExecutionId

Reason = Literal["start", "resume", "timer", "verdict", "sweep", "manual"]


class ExecutionPackage(BaseModel):
    """What a worker needs to run one ``execute`` call: which execution, and why.

    The worker keeps no state between calls; it rebuilds the execution from the store.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: ExecutionId
    flow: str | None = None
    reason: Reason = "manual"
    dispatch_id: str | None = None
    # A start that claimed the execution with its create hands the claimed state to the
    # ``execute`` it makes in-process (``loom.starts``); never on the wire.
    _claimed: Any = PrivateAttr(default=None)


class WaitingGate(BaseModel):
    """A gate or timer the execution waits on."""

    step_id: str
    on: str
    correlation_key: str
    wake_at: float | None = None


class InDoubtStep(BaseModel):
    """A non-idempotent step whose outcome is unknown, awaiting an operator verdict."""

    step_id: str
    effect: str
    idempotency_key: str | None = None
    started_at: float | None = None
    episode: int | None = None


class ExecutionResult(BaseModel):
    """Where an execution stands after an ``execute`` call (or any control call)."""

    model_config = ConfigDict(extra="forbid")

    execution_id: str
    flow: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    last_seq: int
    wake_at: float | None = None
    waiting_on: list[WaitingGate] = Field(default_factory=list[WaitingGate])
    in_doubt: list[InDoubtStep] = Field(default_factory=list[InDoubtStep])
    parked_reason: str | None = None
    meter: dict[str, Any] = Field(default_factory=dict[str, Any])
    state: dict[str, Any] = Field(default_factory=dict[str, Any])

    @classmethod
    def from_state(cls, state: ExecutionState, *, include_state: bool = True) -> ExecutionResult:
        """Summarize a folded state."""
        waiting = (
            [
                WaitingGate(
                    step_id=sid,
                    on=g["on"],
                    correlation_key=g["correlation_key"],
                    wake_at=g["wake_at"],
                )
                for sid, g in state.open_gates().items()
            ]
            if state.status == "suspended"
            else []
        )
        doubts = [
            InDoubtStep(
                step_id=sid,
                effect=state.steps[sid].get("effect", "?"),
                idempotency_key=state.steps[sid].get("idempotency_key"),
                started_at=state.steps[sid].get("started_at"),
                episode=state.steps[sid].get("episode"),
            )
            for sid in state.in_doubt
        ]
        return cls(
            execution_id=state.execution_id,
            flow=state.flow,
            status=state.status,
            output=state.output,
            error=state.error,
            last_seq=state.last_seq,
            wake_at=state.next_wake_at() if state.status == "suspended" else None,
            waiting_on=waiting,
            in_doubt=doubts,
            parked_reason=state.parked_reason,
            meter=state.meter.__dict__.copy(),
            state=_state_dict(state) if include_state else {},
        )


def _state_dict(state: ExecutionState) -> dict[str, Any]:
    return state.to_dict()
