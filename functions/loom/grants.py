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

A rule may also let its principals raise an execution's limits (:mod:`loom.kernel.execution_limits`)
for its flows, up to the values it names: a start asking for more than the flow's own limit
needs a rule allowing at least that much (asking for less is always allowed).

Deployments configure it as JSON, in ``LOOM_GRANTS`` or in the file ``LOOM_GRANTS_FILE``
names::

    {"grants": [
      {"principal": "ops@example.com", "flow": "order.*", "capabilities": ["payments"],
       "limits": {"max_events": 200000}},
      {"principal": "shared-secret", "flow": "*", "capabilities": ["email"]}
    ]}

Python code that calls ``Runtime.start`` without ``by`` is the trusted path: the process's
own code (tests, an embedding app) grants what it asks for, since it could change the policy
anyway.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from loom.errors import ConfigurationError, NotPermittedError

ANONYMOUS = "anonymous"
"""The principal of a request no authenticator identified; ``*`` rules never match it."""


@dataclass(frozen=True)
class GrantRule:
    """One rule: principals matching ``principal`` may grant ``capabilities`` to flows
    matching ``flow``.

    A plain dataclass, not a pydantic model: it is imported with every app, and building a
    model class at import costs a cold start tens of milliseconds.
    """

    principal: str
    flow: str = "*"
    capabilities: frozenset[str] = field(default_factory=frozenset[str])
    limits: Mapping[str, int] = field(default_factory=dict[str, int], hash=False)

    def __post_init__(self) -> None:
        if not self.principal or not self.flow:
            raise ConfigurationError("a grant rule needs a non-empty principal and flow")
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        for name, value in self.limits.items():
            if type(value) is not int or value < 1:
                raise ConfigurationError(
                    f"a grant rule's limit {name} must be a positive integer, not {value!r}"
                )
        object.__setattr__(self, "limits", dict(self.limits))

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


_RULE_KEYS = frozenset({"principal", "flow", "capabilities", "limits"})


def _rule_from(raw: Any, index: int) -> GrantRule:
    """One rule of the JSON form, checked field by field."""
    where = f"grants.{index}"
    if not isinstance(raw, dict):
        raise ConfigurationError(f"grant policy: {where}: a rule is a JSON object")
    rule = cast(dict[str, Any], raw)
    unknown = sorted(set(rule) - _RULE_KEYS)
    if unknown:
        raise ConfigurationError(f"grant policy: {where}: unknown field {unknown[0]!r}")
    principal, flow = rule.get("principal"), rule.get("flow", "*")
    caps: Any = rule.get("capabilities", [])
    if not isinstance(principal, str) or not principal:
        raise ConfigurationError(f"grant policy: {where}.principal: a non-empty string")
    if not isinstance(flow, str) or not flow:
        raise ConfigurationError(f"grant policy: {where}.flow: a non-empty string")
    if not isinstance(caps, list) or not all(isinstance(c, str) for c in cast(list[Any], caps)):
        raise ConfigurationError(f"grant policy: {where}.capabilities: a list of strings")
    limits: Any = rule.get("limits", {})
    if not isinstance(limits, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0
        for v in cast(dict[str, Any], limits).values()
    ):
        raise ConfigurationError(
            f"grant policy: {where}.limits: an object of limit names to positive integers"
        )
    return GrantRule(
        principal, flow, frozenset(cast(list[str], caps)), cast(dict[str, int], limits)
    )


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

    def raisable(self, principal: str, flow: str, name: str) -> int | None:
        """The highest value of limit ``name`` ``principal`` may ask for ``flow`` (``None``:
        no rule lets it raise that limit at all)."""
        values = [
            rule.limits[name]
            for rule in self.rules
            if name in rule.limits and rule.applies(principal, flow)
        ]
        return max(values) if values else None

    def check_limits(
        self, principal: str, flow: str, asked: Mapping[str, float], own: Mapping[str, int]
    ) -> None:
        """Pass if every limit in ``asked`` is at most the flow's ``own``, or at most what
        ``principal`` may raise it to for ``flow``.

        Raises:
            NotPermittedError: A limit asked above both; it names them.
        """
        denied = sorted(
            name
            for name, value in asked.items()
            if name in own
            and value > own[name]
            and value > (self.raisable(principal, flow, name) or own[name])
        )
        if denied:
            raise NotPermittedError(
                f"{principal!r} may not raise {', '.join(denied)} for flow {flow!r} above the "
                "flow's own limits; the grant policy decides who may",
                details={"principal": principal, "flow": flow, "denied_limits": denied},
            )

    @classmethod
    def from_json(cls, text: str) -> GrantPolicy:
        """A policy from its JSON form.

        Raises:
            ConfigurationError: The JSON is malformed or does not fit the schema.
        """
        try:
            doc: Any = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"grant policy: not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or set(cast(dict[str, Any], doc)) - {"grants"}:
            raise ConfigurationError('grant policy: expected {"grants": [...]}')
        raw: Any = cast(dict[str, Any], doc).get("grants", [])
        if not isinstance(raw, list):
            raise ConfigurationError("grant policy: grants: a list of rules")
        return cls(_rule_from(rule, i) for i, rule in enumerate(cast(list[Any], raw)))

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


def recorded_by(principal: str | None, note: str | None = None) -> str | None:
    """What the log records as ``by`` for an act of ``principal`` annotated with ``note``.

    ``note`` is free text from the request (an operator's name typed in a form or a body's
    ``by``): it is kept beside the principal, ``"{note} (via {principal})"``, and never
    authorizes anything. Authority (the grant policy, the caller check) is always decided on
    ``principal`` alone, before this string is made.
    """
    if not note:
        return principal
    return note if principal is None else f"{note} (via {principal})"


def rules(grants: Mapping[str, Mapping[str, Iterable[str]]]) -> list[GrantRule]:
    """Rules from ``{principal: {flow: capabilities}}``, the compact form for Python apps."""
    return [
        GrantRule(principal=principal, flow=flow, capabilities=frozenset(caps))
        for principal, flows in grants.items()
        for flow, caps in flows.items()
    ]
