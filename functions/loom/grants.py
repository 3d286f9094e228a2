"""Who may grant which capabilities to a flow: capabilities come from policy, not requests.

A start names the capabilities the execution should hold; whoever asks (the *principal*: the
authenticated caller of an HTTP route, the publisher of a Pub/Sub message, a Commission
executor, the local user of the CLI) may only grant what a :class:`GrantPolicy` lets that
principal grant for that flow. Anything more is refused with
:class:`~loom.errors.NotPermittedError` (HTTP 403) before anything is written.

A policy is a list of rules; a rule lets ``principal`` grant ``capabilities`` (exact names)
to ``flow``. ``principal`` and ``flow`` are exact names or prefixes ending in ``*``
(``local:*``, ``order.*``; ``*`` alone matches every name); only a rule naming ``anonymous``
exactly speaks for an unauthenticated caller. With no rules nobody may grant anything: a start without
capabilities is always allowed, a start with some is refused.

Deployments configure it as JSON, in ``LOOM_GRANTS`` or in the file ``LOOM_GRANTS_FILE``
names::

    {"grants": [
      {"principal": "ops@example.com", "flow": "order.*", "capabilities": ["payments"]},
      {"principal": "shared-secret", "flow": "*", "capabilities": ["email"]}
    ]}

Python code that calls ``Runtime.start`` without ``by`` is the trusted path: the process's
own code (tests, an embedding app) grants what it asks for, since it could change the policy
anyway.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loom.errors import ConfigurationError, NotPermittedError

ANONYMOUS = "anonymous"
"""The principal of a request no authenticator identified; ``*`` rules never match it."""


class GrantRule(BaseModel):
    """One rule: principals matching ``principal`` may grant ``capabilities`` to flows
    matching ``flow``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    principal: str = Field(min_length=1)
    flow: str = Field(default="*", min_length=1)
    capabilities: frozenset[str] = Field(default_factory=frozenset[str])

    def applies(self, principal: str, flow: str) -> bool:
        """Whether this rule speaks for ``principal`` starting ``flow``."""
        if principal == ANONYMOUS and self.principal != ANONYMOUS:
            return False  # only a rule naming "anonymous" speaks for the unauthenticated
        return _matches(self.principal, principal) and _matches(self.flow, flow)


def _matches(pattern: str, name: str) -> bool:
    """``pattern`` is a name, or a prefix ending in ``*`` (``*`` alone matches every name)."""
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


class _PolicyDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    grants: list[GrantRule] = Field(default_factory=list[GrantRule])


class GrantPolicy:
    """The rules saying who may grant which capabilities (see the module docstring).

    Args:
        rules: The rules; none means nobody may grant anything.
    """

    def __init__(self, rules: Iterable[GrantRule] = ()) -> None:
        self.rules = tuple(rules)

    def grantable(self, principal: str, flow: str) -> frozenset[str]:
        """Every capability ``principal`` may grant to ``flow``."""
        granted: set[str] = set()
        for rule in self.rules:
            if rule.applies(principal, flow):
                granted |= rule.capabilities
        return frozenset(granted)

    def check(self, principal: str, flow: str, capabilities: Iterable[str]) -> None:
        """Pass if ``principal`` may grant every one of ``capabilities`` to ``flow``.

        Raises:
            NotPermittedError: Some capability is not grantable; it names them.
        """
        asked = set(capabilities)
        denied = sorted(asked - self.grantable(principal, flow))
        if denied:
            raise NotPermittedError(
                f"{principal!r} may not grant {', '.join(denied)} to flow {flow!r}; "
                "capabilities come from the deployment's grant policy, not the request",
                details={"principal": principal, "flow": flow, "denied": denied},
            )

    @classmethod
    def from_json(cls, text: str) -> GrantPolicy:
        """A policy from its JSON form.

        Raises:
            ConfigurationError: The JSON is malformed or does not fit the schema.
        """
        try:
            doc = _PolicyDoc.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "policy"
            raise ConfigurationError(f"grant policy: {where}: {first['msg']}") from None
        return cls(doc.grants)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GrantPolicy | None:
        """The policy ``LOOM_GRANTS`` or ``LOOM_GRANTS_FILE`` configures, or ``None``.

        Raises:
            ConfigurationError: Both are set, the file cannot be read, or the JSON is bad.
        """
        env = os.environ if env is None else env
        inline, path = env.get("LOOM_GRANTS"), env.get("LOOM_GRANTS_FILE")
        if inline and path:
            raise ConfigurationError("set LOOM_GRANTS or LOOM_GRANTS_FILE, not both")
        if path:
            try:
                inline = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigurationError(f"cannot read LOOM_GRANTS_FILE {path!r}: {exc}") from exc
        return cls.from_json(inline) if inline else None


def rules(grants: Mapping[str, Mapping[str, Iterable[str]]]) -> list[GrantRule]:
    """Rules from ``{principal: {flow: capabilities}}``, the compact form for Python apps."""
    return [
        GrantRule(principal=principal, flow=flow, capabilities=frozenset(caps))
        for principal, flows in grants.items()
        for flow, caps in flows.items()
    ]
