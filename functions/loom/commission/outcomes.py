"""What an executor answers at the end of a step: one :data:`ExecutorOutcome`.

"Loom proposes. Commission invokes." Every executor (a Loom flow, a human tool, a plain
callable) ends a step with exactly one of these values and invokes nothing itself. An action
that needs authority is proposed like any other: the runtime, not the executor, asks the
authority provider, so no executor ever suspends for authority.

The union is tagged by ``kind`` (the class name), so an outcome round-trips through JSON, for
example as the output of a Loom flow.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

from loom.commission.errors import ExecutorError
from loom.errors import InvalidPayloadError
from loom.kernel.payloads import dump_exact


class _Outcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProposedAction(_Outcome):
    """The executor proposes one action; the runtime rechecks it and may invoke it.

    Attributes:
        action_id: The action, versioned, e.g. ``software.change/1``.
        args: The action's JSON arguments.
    """

    kind: Literal["ProposedAction"] = "ProposedAction"
    action_id: str = Field(min_length=1)
    args: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class NeedsHumanJudgment(_Outcome):
    """The executor cannot go on without a person's judgment.

    Attributes:
        question: What the person is asked to judge.
        context: JSON facts that help them judge.
    """

    kind: Literal["NeedsHumanJudgment"] = "NeedsHumanJudgment"
    question: str
    context: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class Suspended(_Outcome):
    """The executor waits for something outside the case (never for authority).

    A suspended step is resumed, not replaced: the next run asks the executor again at the
    same step number.

    Attributes:
        waiting_on: What it waits for, e.g. ``loom.execution`` or ``human.tool``.
        correlation_key: The key that identifies the awaited thing, if any.
        reason: A human-readable explanation.
    """

    kind: Literal["Suspended"] = "Suspended"
    waiting_on: str
    correlation_key: str | None = None
    reason: str = ""


class NoUsefulAction(_Outcome):
    """The executor sees nothing useful to do on the case now."""

    kind: Literal["NoUsefulAction"] = "NoUsefulAction"


class CompletedLocalReasoning(_Outcome):
    """The executor finished a step of its own reasoning; it proposes nothing yet."""

    kind: Literal["CompletedLocalReasoning"] = "CompletedLocalReasoning"


class CaseMoved(_Outcome):
    """The executor saw the case move past the revision its step started from.

    Attributes:
        revision: The revision the executor saw.
    """

    kind: Literal["CaseMoved"] = "CaseMoved"
    revision: int = Field(ge=0)


ExecutorOutcome = Annotated[
    ProposedAction
    | NeedsHumanJudgment
    | Suspended
    | NoUsefulAction
    | CompletedLocalReasoning
    | CaseMoved,
    Field(discriminator="kind"),
]

OUTCOME_ADAPTER: TypeAdapter[ExecutorOutcome] = TypeAdapter(ExecutorOutcome)

_OUTCOME_TYPES = (
    ProposedAction,
    NeedsHumanJudgment,
    Suspended,
    NoUsefulAction,
    CompletedLocalReasoning,
    CaseMoved,
)


def parse_outcome(value: Any) -> ExecutorOutcome:
    """Turn an outcome, or its JSON-able form, into an :data:`ExecutorOutcome`.

    Args:
        value: An outcome model or a dict tagged with ``kind``.

    Returns:
        The outcome.

    Raises:
        ExecutorError: ``value`` is not an executor outcome.
    """
    if isinstance(value, _OUTCOME_TYPES):
        return _exact(value)
    try:
        return _exact(OUTCOME_ADAPTER.validate_python(value))
    except ValidationError as exc:
        raise ExecutorError(
            f"an executor answered something that is not an outcome: {exc.error_count()} "
            "validation error(s)",
            details={"errors": exc.errors(include_url=False, include_context=False)},
        ) from exc


def _exact(outcome: ExecutorOutcome) -> ExecutorOutcome:
    """``outcome``, if its JSON values are exact JSON: a ``NaN`` in a proposal's args was
    invoked as ``NaN`` and recorded as ``null``, and a lone surrogate failed the append."""
    values = outcome.args if isinstance(outcome, ProposedAction) else None
    if isinstance(outcome, NeedsHumanJudgment):
        values = outcome.context
    try:
        dump_exact(values, f"the {outcome.kind}'s JSON")
    except InvalidPayloadError as exc:
        raise ExecutorError(exc.message, details=exc.details) from None
    return outcome
