"""Case events and their fold.

A case is an event-sourced stream (ADR 0008). Each event is an immutable, past-tense fact with
``type`` and ``schema_version``; ``seq`` and ``at`` come from the stream it is stored in.
:func:`fold_case` is pure: the case's state is a function of its events.

Revisions: a case opens at revision 0 and moves to the next revision only on
``EffectPerformed`` (an effect the port reported performed) or ``CaseRevised`` (the embedder
changed the case). Nothing else moves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from loom.commission.admission import Refusal
from loom.commission.errors import CommissionError
from loom.commission.model import (
    AnyCommission,
    LastResult,
    RequestRecord,
    StepInput,
    is_assigned,
    is_draft,
)
from loom.commission.outcomes import ExecutorOutcome, Suspended
from loom.commission.ports import Pending, Performed
from loom.events import ErrorInfo

CASE_SCHEMA_VERSION = 1


class _CaseEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = CASE_SCHEMA_VERSION
    seq: int = 0
    at: float = 0.0


class CaseOpened(_CaseEvent):
    """The case exists, at revision 0, under its commission."""

    type: Literal["CaseOpened"] = "CaseOpened"
    case_id: str
    commission: AnyCommission
    frontier: tuple[str, ...] = ()
    subject: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class CommissionAssigned(_CaseEvent):
    """The draft commission is now held by ``assignee``."""

    type: Literal["CommissionAssigned"] = "CommissionAssigned"
    assignee: str


class CommissionClosed(_CaseEvent):
    """The commission ended; nothing is invoked under it again."""

    type: Literal["CommissionClosed"] = "CommissionClosed"
    reason: str = ""


class CaseRevised(_CaseEvent):
    """The embedder moved the case to the next revision, with a new frontier."""

    type: Literal["CaseRevised"] = "CaseRevised"
    frontier: tuple[str, ...]
    reason: str = ""
    by: str = "embedder"


class ExecutorStepped(_CaseEvent):
    """An executor ended step ``step``, which started from ``revision``, with ``outcome``."""

    type: Literal["ExecutorStepped"] = "ExecutorStepped"
    step: int
    revision: int
    outcome: ExecutorOutcome


class RequestAdmitted(_CaseEvent):
    """The intent record: durable before the request is invoked."""

    type: Literal["RequestAdmitted"] = "RequestAdmitted"
    request: RequestRecord


class RequestReinvoked(_CaseEvent):
    """The intent record of invoking a Pending request again, revalidated under the
    revision it was appended at; the request is in flight (``admitted``) again."""

    type: Literal["RequestReinvoked"] = "RequestReinvoked"
    request: RequestRecord


class EffectPerformed(_CaseEvent):
    """The port performed the request; the case moves to the next revision."""

    type: Literal["EffectPerformed"] = "EffectPerformed"
    request_id: str
    performed: Performed
    frontier: tuple[str, ...]
    by: Literal["port", "operator"] = "port"


class EffectPending(_CaseEvent):
    """The port answered Pending; the request is revalidated and invoked again."""

    type: Literal["EffectPending"] = "EffectPending"
    request_id: str
    pending: Pending


class RequestRefused(_CaseEvent):
    """A proposal or request was refused, by the recheck, the port or an operator."""

    type: Literal["RequestRefused"] = "RequestRefused"
    refusal: Refusal


class EffectErrored(_CaseEvent):
    """The port raised: whether the effect happened is not known. Never re-invoked."""

    type: Literal["EffectErrored"] = "EffectErrored"
    request_id: str
    error: ErrorInfo


CaseEvent = Annotated[
    CaseOpened
    | CommissionAssigned
    | CommissionClosed
    | CaseRevised
    | ExecutorStepped
    | RequestAdmitted
    | RequestReinvoked
    | EffectPerformed
    | EffectPending
    | RequestRefused
    | EffectErrored,
    Field(discriminator="type"),
]

CASE_EVENT_ADAPTER: TypeAdapter[CaseEvent] = TypeAdapter(CaseEvent)


class OpenRequest(BaseModel):
    """A request admitted and not yet settled.

    Attributes:
        request: The request's facts.
        status: ``admitted`` (invoked or about to be; no answer recorded) or ``pending``.
        pending: The port's last Pending answer, when ``status`` is ``pending``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request: RequestRecord
    status: Literal["admitted", "pending"]
    pending: Pending | None = None


class CaseState(BaseModel):
    """The folded state of a case.

    Attributes:
        case_id: The case.
        seq: The seq of the last event folded (the stream position to append after).
        revision: The revision.
        frontier: The action ids open at this revision.
        subject: The case's JSON subject.
        commission: The commission, in its current state.
        steps: Executor steps completed (a suspended step does not count).
        open_request: The request admitted and not yet settled, if any.
        last: What became of the last request.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    seq: int
    revision: int = 0
    frontier: tuple[str, ...] = ()
    subject: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])
    commission: AnyCommission
    steps: int = 0
    open_request: OpenRequest | None = None
    last: LastResult | None = None

    def step_input(self) -> StepInput:
        """What an executor receives for the next step: data only.

        Raises:
            CommissionError: The commission is not assigned (nobody works the case).
        """
        commission = self.commission
        if not is_assigned(commission):
            raise CommissionError(f"case {self.case_id!r}: the commission is not assigned")
        return StepInput(
            case_id=self.case_id,
            revision=self.revision,
            step=self.steps + 1,
            frontier=self.frontier,
            subject=self.subject,
            commission_id=commission.commission_id,
            mandate=commission.mandate,
            assignee=commission.state.assignee,
            last=self.last,
        )


def _settled(state: CaseState, last: LastResult, **changes: object) -> CaseState:
    """``state`` with ``last`` recorded, and the open request closed if ``last`` is about it."""
    opened = state.open_request
    if opened is not None and opened.request.request_id == last.request_id:
        opened = None
    return state.model_copy(update={"open_request": opened, "last": last, **changes})


def _apply_request(state: CaseState, event: CaseEvent) -> CaseState:
    match event:
        case RequestAdmitted(request=request) | RequestReinvoked(request=request):
            return state.model_copy(
                update={"open_request": OpenRequest(request=request, status="admitted")}
            )
        case EffectPending(request_id=request_id, pending=pending):
            assert state.open_request is not None, "EffectPending without an open request"
            opened = state.open_request.model_copy(update={"status": "pending", "pending": pending})
            last = LastResult(
                kind="pending",
                request_id=request_id,
                action_id=opened.request.action_id,
                reason=pending.reason,
            )
            return state.model_copy(update={"open_request": opened, "last": last})
        case EffectPerformed(request_id=request_id, performed=performed, frontier=frontier):
            action = state.open_request.request.action_id if state.open_request else ""
            last = LastResult(
                kind="performed",
                request_id=request_id,
                action_id=action,
                ref=performed.ref,
                message=f"performed {performed.what} {performed.ref}",
                detail=performed.detail,
            )
            return _settled(state, last, revision=state.revision + 1, frontier=frontier)
        case RequestRefused(refusal=r):
            last = LastResult(
                kind="refused",
                request_id=r.request_id,
                action_id=r.action_id,
                reason=r.reason,
                message=r.message,
                detail=r.detail,
            )
            return _settled(state, last)
        case EffectErrored(request_id=request_id, error=error):
            action = state.open_request.request.action_id if state.open_request else ""
            last = LastResult(
                kind="error",
                request_id=request_id,
                action_id=action,
                reason=error.code,
                message=error.message,
            )
            return _settled(state, last)
        case _:
            raise AssertionError(f"not a request event: {event.type}")


def apply_case_event(state: CaseState, event: CaseEvent) -> CaseState:
    """The state after ``event``. Pure."""
    state = state.model_copy(update={"seq": event.seq})
    match event:
        case CaseOpened():
            raise ValueError(f"case {state.case_id!r} is opened twice")
        case CommissionAssigned(assignee=assignee):
            if not is_draft(state.commission):
                raise ValueError(f"case {state.case_id!r}: only a draft commission is assigned")
            return state.model_copy(update={"commission": state.commission.assign(assignee)})
        case CommissionClosed(reason=reason):
            return state.model_copy(update={"commission": state.commission.close(reason)})
        case CaseRevised(frontier=frontier):
            return state.model_copy(update={"revision": state.revision + 1, "frontier": frontier})
        case ExecutorStepped(outcome=outcome):
            if isinstance(outcome, Suspended):
                return state
            return state.model_copy(update={"steps": state.steps + 1})
        case _:
            return _apply_request(state, event)


def fold_case(events: Iterable[CaseEvent], state: CaseState | None = None) -> CaseState:
    """Fold ``events`` onto ``state`` (or from the start: the first event opens the case).

    Raises:
        ValueError: The events do not form a case (e.g. the first one is not ``CaseOpened``).
    """
    for event in events:
        if state is None:
            if not isinstance(event, CaseOpened):
                raise ValueError(f"a case starts with CaseOpened, not {event.type}")
            state = CaseState(
                case_id=event.case_id,
                seq=event.seq,
                frontier=event.frontier,
                subject=event.subject,
                commission=event.commission,
            )
        else:
            state = apply_case_event(state, event)
    if state is None:
        raise ValueError("no events: the case was never opened")
    return state
