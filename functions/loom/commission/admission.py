"""Admission: the recheck immediately before an effect, and the request it admits.

:class:`AdmittedRequest` is the only thing an effect port is handed, and only
:class:`Admission` builds one, after it rechecked the commission, the case revision, the
frontier, that some port performs the action, and authority. Calling the class yourself raises
:class:`~loom.commission.errors.AdmissionError`; it cannot be subclassed, pickled or copied
into a second identity, and :func:`require_admitted` lets a port refuse an object forged
around the constructor (``object.__new__``).

Minting needs a :class:`MintKey`, a capability object only a Commission runtime is issued
(one per runtime, as it is built, held privately). :func:`require_admitted` accepts a
request only if it was minted under a key that was issued and whose runtime is still alive,
so an ``Admission(...).check(...)`` made outside a runtime (with no key, or a key built
around the constructor) mints nothing a port accepts. Keys are issued by
:func:`_issue_key`, which is no public name and refuses any owner but a
:class:`~loom.commission.runtime.CommissionRuntime` that holds none yet: code outside a
runtime cannot ask for one, nor a second one for a runtime already built.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal, NoReturn, final

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from loom.commission.authority import AuthorityProvider, AuthorityQuery, Denied
from loom.commission.errors import AdmissionError
from loom.commission.model import (
    AnyCommission,
    Grant,
    RequestRecord,
    is_assigned,
)

_MINT = object()
_minted: weakref.WeakSet[AdmittedRequest] = weakref.WeakSet()
_issued: weakref.WeakKeyDictionary[MintKey, weakref.ref[object]] = weakref.WeakKeyDictionary()


@final
class MintKey:
    """The capability to mint :class:`AdmittedRequest`: issued to one runtime, kept private.

    Raises:
        AdmissionError: When constructed anywhere but in :func:`_issue_key`.
    """

    __slots__ = ("__weakref__",)

    def __init__(self, *, _mint: object = None) -> None:
        if _mint is not _MINT:
            raise AdmissionError("a MintKey is issued only to a Commission runtime")

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("MintKey cannot be subclassed")

    def __reduce__(self) -> NoReturn:
        raise AdmissionError("a MintKey cannot be pickled")


_OWNER = ("loom.commission.runtime", "CommissionRuntime")


def _issue_key(owner: object) -> MintKey:  # pyright: ignore[reportUnusedFunction]  # (its caller: the runtime)
    """A new key, valid while ``owner`` (the Commission runtime holding it) is alive.

    Raises:
        AdmissionError: ``owner`` is no Commission runtime (exactly that class), or it was
            issued a key already.
    """
    kind = type(owner)
    if (kind.__module__, kind.__qualname__) != _OWNER:
        raise AdmissionError("a MintKey is issued only to a Commission runtime")
    if any(ref() is owner for ref in _issued.values()):
        raise AdmissionError("this Commission runtime was issued its key already")
    key = MintKey(_mint=_MINT)
    _issued[key] = weakref.ref(owner)
    return key


def _key_is_live(key: object) -> bool:
    if not isinstance(key, MintKey):
        return False
    owner = _issued.get(key)
    return owner is not None and owner() is not None


@final
class AdmittedRequest:
    """A request the runtime admitted for one invocation. Read-only.

    Raises:
        AdmissionError: When constructed anywhere but in :class:`Admission`.
    """

    __slots__ = ("__weakref__", "_key", "_record")
    _record: RequestRecord
    _key: MintKey

    def __init__(self, record: RequestRecord, *, _mint: object = None, _key: object = None) -> None:
        if _mint is not _MINT or not _key_is_live(_key):
            raise AdmissionError("an AdmittedRequest is built only by the Commission runtime")
        object.__setattr__(self, "_record", record)
        object.__setattr__(self, "_key", _key)
        _minted.add(self)

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("AdmittedRequest cannot be subclassed")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("an AdmittedRequest is read-only")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("an AdmittedRequest is read-only")

    def __reduce__(self) -> NoReturn:
        raise AdmissionError("an AdmittedRequest cannot be pickled: a copy would not be admitted")

    def __copy__(self) -> AdmittedRequest:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> AdmittedRequest:
        return self

    def __repr__(self) -> str:
        r = self._record
        return f"AdmittedRequest({r.request_id!r}, action={r.action_id!r}, revision={r.revision})"

    @property
    def record(self) -> RequestRecord:
        """The request's facts, as the case records them."""
        return self._record

    @property
    def request_id(self) -> str:
        """``{case_id}:{revision}:{step}``; the same across re-invocations of a pending one."""
        return self._record.request_id

    @property
    def case_id(self) -> str:
        """The case."""
        return self._record.case_id

    @property
    def commission_id(self) -> str:
        """The commission it was admitted under."""
        return self._record.commission_id

    @property
    def action_id(self) -> str:
        """The action to perform."""
        return self._record.action_id

    @property
    def args(self) -> dict[str, JsonValue]:
        """A copy of the action's arguments (a port cannot alter the recorded ones)."""
        return copy.deepcopy(self._record.args)

    @property
    def revision(self) -> int:
        """The case revision it was admitted at."""
        return self._record.revision


def require_admitted(request: object) -> AdmittedRequest:
    """Return ``request`` if the runtime admitted it.

    Raises:
        AdmissionError: ``request`` is not an ``AdmittedRequest`` the runtime built.
    """
    if not isinstance(request, AdmittedRequest) or request not in _minted:
        raise AdmissionError("refusing a request the Commission runtime did not admit")
    if not _key_is_live(getattr(request, "_key", None)):
        raise AdmissionError("refusing a request minted without a live runtime's key")
    return request


class Refusal(BaseModel):
    """Why a proposal or a request was refused; the case records it.

    Attributes:
        request_id: The request, when one had been admitted before.
        action_id: The action.
        by: ``runtime`` (the recheck), ``port`` (the effect port) or ``operator``.
        reason: A short code: ``commission_not_assigned``, ``revision_changed``,
            ``not_on_frontier``, ``no_effect_port``, ``authority_denied``, or the port's own.
        message: A human-readable explanation.
        detail: Further JSON facts.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str | None = None
    action_id: str
    by: Literal["runtime", "port", "operator"]
    reason: str
    message: str = ""
    detail: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class Proposal(BaseModel):
    """A proposed action, placed at the case revision and step it was proposed from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    case_id: str
    action_id: str
    args: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])
    revision: int
    step: int


class Admission:
    """Rechecks a proposal against the case as it is now, and admits or refuses it.

    Args:
        authority: Asked last, only when every local check passed.
        performs: Whether some effect port performs an action.
        key: The runtime's :class:`MintKey` (see :func:`_issue_key`); without a live one,
            nothing can be admitted.

    Raises:
        AdmissionError: ``key`` is not a live key a runtime was issued.
    """

    def __init__(
        self, authority: AuthorityProvider, performs: Callable[[str], bool], key: MintKey
    ) -> None:
        if not _key_is_live(key):
            raise AdmissionError("an Admission needs the key a Commission runtime was issued")
        self._authority = authority
        self._performs = performs
        self._key = key

    async def check(
        self,
        *,
        commission: AnyCommission,
        revision: int,
        frontier: Sequence[str],
        proposal: Proposal,
    ) -> AdmittedRequest | Refusal:
        """Admit ``proposal`` if the case still allows it; otherwise say why not.

        Args:
            commission: The case's commission now.
            revision: The case's revision now.
            frontier: The case's frontier now.
            proposal: The proposal, with the revision it was made at.
        """

        def refuse(reason: str, message: str) -> Refusal:
            return Refusal(
                request_id=proposal.request_id,
                action_id=proposal.action_id,
                by="runtime",
                reason=reason,
                message=message,
            )

        if not is_assigned(commission):
            return refuse("commission_not_assigned", f"commission is {commission.state.kind}")
        if revision != proposal.revision:
            return refuse(
                "revision_changed",
                f"proposed at revision {proposal.revision}, the case is at {revision}",
            )
        if proposal.action_id not in frontier:
            return refuse("not_on_frontier", f"{proposal.action_id!r} is not on the frontier")
        if not self._performs(proposal.action_id):
            return refuse("no_effect_port", f"no effect port performs {proposal.action_id!r}")
        query = AuthorityQuery(
            case_id=proposal.case_id,
            revision=revision,
            action_id=proposal.action_id,
            args=proposal.args,
        )
        try:
            decision = await self._authority.authorize(commission, query)
        except Exception as exc:  # the contract: a failing provider denies
            return refuse("authority_denied", f"authority provider failed: {exc!r}")
        if isinstance(decision, Denied):
            return refuse("authority_denied", f"{decision.by}: {decision.reason}")
        record = RequestRecord(
            **proposal.model_dump(),
            commission_id=commission.commission_id,
            grant=Grant(by=decision.by, grant_id=decision.grant_id),
        )
        return AdmittedRequest(record, _mint=_MINT, _key=self._key)
