"""The Commission and what an executor may see of its case.

A :class:`Commission` is the mandate under which a case is worked. Its state is a type
parameter, so code that needs an assigned commission says so in its signature
(``Commission[Assigned]``) and a type checker refuses a draft or closed one::

    draft = Commission[Draft](commission_id="c-1", mandate="fix the bug", state=Draft())
    assigned = draft.assign("triage-bot")        # Commission[Assigned]

A case has a revision (moved only by a performed effect or an explicit revise) and a
frontier: the action ids open on the case at that revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Generic, Literal, TypeGuard, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Draft(_Frozen):
    """A commission nobody holds yet. Nothing is invoked under it."""

    kind: Literal["draft"] = "draft"


class Assigned(_Frozen):
    """A commission held by an assignee; the only state under which effects run.

    Attributes:
        assignee: Who holds it (the executor's principal), as the authority provider knows it.
    """

    kind: Literal["assigned"] = "assigned"
    assignee: str = Field(min_length=1)


class Closed(_Frozen):
    """A commission that ended. Nothing is invoked under it again.

    Attributes:
        reason: Why it ended.
    """

    kind: Literal["closed"] = "closed"
    reason: str = ""


S = TypeVar("S", Draft, Assigned, Closed)


class Commission(_Frozen, Generic[S]):
    """The mandate a case is worked under, in state ``S``.

    Attributes:
        commission_id: The commission's id.
        mandate: What the assignee is commissioned to do, in words.
        state: The state, with its own data (e.g. the assignee).
    """

    commission_id: str = Field(min_length=1)
    mandate: str = ""
    state: S

    def assign(self: Commission[Draft], assignee: str) -> Commission[Assigned]:
        """The same commission, held by ``assignee``."""
        return Commission[Assigned](
            commission_id=self.commission_id,
            mandate=self.mandate,
            state=Assigned(assignee=assignee),
        )

    def close(self, reason: str = "") -> Commission[Closed]:
        """The same commission, ended."""
        return Commission[Closed](
            commission_id=self.commission_id, mandate=self.mandate, state=Closed(reason=reason)
        )


def _field(obj: object, name: str) -> object:
    if isinstance(obj, Mapping):
        return cast(Mapping[str, object], obj).get(name)
    return getattr(obj, name, None)


def _state_kind(value: object) -> str | None:
    """The discriminator of :data:`AnyCommission`: the state's ``kind``."""
    kind = _field(_field(value, "state"), "kind")
    return kind if isinstance(kind, str) else None


AnyCommission = Annotated[
    Annotated[Commission[Draft], Tag("draft")]
    | Annotated[Commission[Assigned], Tag("assigned")]
    | Annotated[Commission[Closed], Tag("closed")],
    Discriminator(_state_kind),
]
"""A commission in any state, as a case stores it."""


def is_draft(
    commission: Commission[Draft] | Commission[Assigned] | Commission[Closed],
) -> TypeGuard[Commission[Draft]]:
    """Whether ``commission`` is a draft (and may be assigned)."""
    return isinstance(commission.state, Draft)


def is_assigned(
    commission: Commission[Draft] | Commission[Assigned] | Commission[Closed],
) -> TypeGuard[Commission[Assigned]]:
    """Whether ``commission`` is assigned (and may have effects invoked under it)."""
    return isinstance(commission.state, Assigned)


class Grant(_Frozen):
    """The authority an admission rested on.

    Attributes:
        by: The authority provider that granted it.
        grant_id: The provider's reference for the grant, if it has one.
    """

    by: str
    grant_id: str = ""


class RequestRecord(_Frozen):
    """The facts of one admitted request, as the case records them.

    Attributes:
        request_id: ``{case_id}:{revision}:{step}``: unique per case, stable across retries.
        case_id: The case.
        commission_id: The commission it was admitted under.
        action_id: The action.
        args: The action's arguments.
        revision: The case revision it was admitted at.
        step: The executor step that proposed it.
        grant: The authority it was admitted on.
    """

    request_id: str
    case_id: str
    commission_id: str
    action_id: str
    args: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])
    revision: int
    step: int
    grant: Grant


class LastResult(_Frozen):
    """What became of the last request, so the executor's next step can take it into account.

    Attributes:
        kind: ``performed``, ``pending``, ``refused`` or ``error``.
        request_id: The request, when one was built.
        action_id: The proposed action.
        reason: Why it was refused or failed (a short code).
        message: A human-readable explanation.
        ref: What was performed (e.g. a commit or an attempt id), for ``performed``.
        detail: JSON facts the port reported (e.g. a read's output).
    """

    kind: Literal["performed", "pending", "refused", "error"]
    request_id: str | None = None
    action_id: str
    reason: str = ""
    message: str = ""
    ref: str | None = None
    detail: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class StepInput(_Frozen):
    """Everything an executor receives for one step: plain data, no handles, no credentials.

    Attributes:
        case_id: The case.
        revision: The revision the step starts from.
        step: The step number (1-based; a suspended step keeps its number).
        frontier: The action ids open on the case at this revision.
        subject: The case's JSON subject (what the case is about).
        commission_id: The commission.
        mandate: The commission's mandate.
        assignee: Who holds the commission.
        last: What became of the last request, if any.
    """

    case_id: str
    revision: int
    step: int
    frontier: tuple[str, ...]
    subject: dict[str, JsonValue]
    commission_id: str
    mandate: str
    assignee: str
    last: LastResult | None = None
