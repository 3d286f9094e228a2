"""The effect port: the embedder's side of "Commission invokes".

The runtime hands a port an :class:`~loom.commission.admission.AdmittedRequest` (which only
the runtime can build) together with the assigned commission. The port answers with an
:data:`EffectOutcome` or raises :class:`~loom.commission.errors.EffectError`.
"""

from __future__ import annotations

import abc
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from loom.commission.admission import AdmittedRequest
from loom.commission.model import Assigned, Commission


class _Outcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Performed(_Outcome):
    """The effect happened. The case moves to a new revision.

    Attributes:
        what: The kind of thing performed, e.g. ``git.commit`` or ``connectors.attempt``.
        ref: Its identity: the commit, the attempt, the audit record.
        detail: Further JSON facts (e.g. the operation's output).
    """

    outcome: Literal["performed"] = "performed"
    what: str
    ref: str
    detail: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class Pending(_Outcome):
    """The effect is under way. The runtime revalidates and invokes the request again.

    Attributes:
        reason: Why it is not finished.
        retry_after_s: How long to wait before the next invocation.
    """

    outcome: Literal["pending"] = "pending"
    reason: str = ""
    retry_after_s: float = Field(default=0.0, ge=0.0)


class Refused(_Outcome):
    """The port refused the request; nothing was performed.

    Attributes:
        reason: A short code for why.
        detail: Further JSON facts.
    """

    outcome: Literal["refused"] = "refused"
    reason: str
    detail: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


EffectOutcome = Annotated[Performed | Pending | Refused, Field(discriminator="outcome")]


class EffectPort(abc.ABC):
    """Performs admitted requests for the actions it knows.

    Contract:

    * ``performs`` is pure and cheap: whether this port performs ``action`` at all.
    * ``invoke`` is called once per admission (again only after it answered ``Pending``,
      with the same ``request_id``). It answers ``Performed`` only when the effect happened,
      naming what it performed; ``Refused`` only when nothing was performed; ``Pending`` when
      it must be asked again. When it cannot tell, it raises ``EffectError``.
    * It never falls back to another path and never resends on its own.
    * It should call :func:`~loom.commission.admission.require_admitted` on the request.
    """

    @abc.abstractmethod
    def performs(self, action: str) -> bool:
        """Whether this port performs ``action``."""

    @abc.abstractmethod
    async def invoke(
        self, commission: Commission[Assigned], request: AdmittedRequest
    ) -> EffectOutcome:
        """Perform ``request`` under ``commission``.

        Raises:
            EffectError: The port cannot tell what happened, or failed before deciding.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release what the port holds. Default: nothing."""
