"""The authority SPI: may this assignee take this action on this case, now?

The runtime asks immediately before every invocation, including each re-invocation of a
pending request, so a revoked grant stops the next attempt. Executors never ask: they propose,
and a proposal the provider denies is refused and recorded with the provider's reason.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from loom.commission.model import Assigned, Commission


class AuthorityQuery(BaseModel):
    """One question to the authority provider.

    Attributes:
        case_id: The case.
        revision: The case's current revision.
        action_id: The proposed action.
        args: Its arguments.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    revision: int
    action_id: str
    args: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class Granted(BaseModel):
    """The action may be taken.

    Attributes:
        by: The provider's name, recorded with the admission.
        grant_id: The provider's reference for the grant, if any.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Literal["granted"] = "granted"
    by: str
    grant_id: str = ""


class Denied(BaseModel):
    """The action may not be taken.

    Attributes:
        by: The provider's name.
        reason: Why, recorded with the refusal.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Literal["denied"] = "denied"
    by: str
    reason: str


AuthorityDecision = Annotated[Granted | Denied, Field(discriminator="decision")]


class AuthorityProvider(abc.ABC):
    """Decides whether an assigned commission may take an action.

    Contract: ``authorize`` is asked immediately before each invocation and answers from the
    current state of its grants (no caching across calls that could outlive a revocation).
    It must not invoke the action. An exception it raises is treated as a denial.
    """

    @abc.abstractmethod
    async def authorize(
        self, commission: Commission[Assigned], query: AuthorityQuery
    ) -> AuthorityDecision:
        """Grant or deny ``query`` under ``commission``."""


class StaticAuthority(AuthorityProvider):
    """Grants from a fixed table: assignee → the action ids it may take (``*`` for all).

    Args:
        grants: For each assignee, the action ids it holds authority for.
        name: The provider's name in grants and denials.
    """

    def __init__(self, grants: Mapping[str, Collection[str]], *, name: str = "static") -> None:
        self._grants = {who: frozenset(actions) for who, actions in grants.items()}
        self._name = name

    def revoke(self, assignee: str, action_id: str) -> None:
        """Withdraw one grant; the next check denies it."""
        self._grants[assignee] = self._grants.get(assignee, frozenset()) - {action_id}

    async def authorize(
        self, commission: Commission[Assigned], query: AuthorityQuery
    ) -> AuthorityDecision:
        held = self._grants.get(commission.state.assignee, frozenset())
        if query.action_id in held or "*" in held:
            return Granted(by=self._name, grant_id=f"{commission.state.assignee}:{query.action_id}")
        return Denied(
            by=self._name,
            reason=f"{commission.state.assignee!r} holds no authority for {query.action_id!r}",
        )
