"""Connector endpoints and bindings, as the host declares them in YAML.

One endpoint per Connector instance (its URL, a credential reference that the host's resolver
turns into the service credential, and whether plain http is admitted); one binding per action
(the instance and operation it is bound to, and the operation's effect, ``write`` or
``read``)::

    connectors:
      endpoints:
        - instance: github-main
          url: https://connectors.internal.example
          credential: env:CONNECTORS_GITHUB_TOKEN
          allow_plain_http: false
      bindings:
        - action: github.issue.comment/1
          instance: github-main
          operation: issues.comment.create
          effect: write
"""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from loom.commission.errors import ConnectorsConfigError


class Effect(StrEnum):
    """What a bound operation does: ``write`` (the service's mutation profile) or ``read``."""

    WRITE = "write"
    READ = "read"


class ConnectorEndpoint(BaseModel):
    """Where one Connector instance is served.

    Attributes:
        instance: The Connector instance's id; the service must describe itself as this one.
        url: The service's base URL (``https://``; ``http://`` only if admitted).
        credential: A reference the credential resolver turns into the service credential.
        allow_plain_http: Whether an ``http://`` URL is admitted.
        timeout_s: Bound on each request to the service.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance: str = Field(min_length=1)
    url: str = Field(min_length=1)
    credential: str = Field(min_length=1)
    allow_plain_http: bool = False
    timeout_s: float = Field(default=30.0, gt=0)


class ConnectorBinding(BaseModel):
    """One action bound to one operation of one Connector instance.

    Attributes:
        action: The Commission action id.
        instance: The Connector instance.
        operation: The operation on that instance.
        effect: What the operation does, as the host declares it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: str = Field(min_length=1)
    instance: str = Field(min_length=1)
    operation: str = Field(min_length=1)
    effect: Effect


class ConnectorsConfig(BaseModel):
    """Every endpoint and binding the host declares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoints: tuple[ConnectorEndpoint, ...] = ()
    bindings: tuple[ConnectorBinding, ...] = ()

    @field_validator("endpoints")
    @classmethod
    def _one_endpoint_per_instance(
        cls, endpoints: tuple[ConnectorEndpoint, ...]
    ) -> tuple[ConnectorEndpoint, ...]:
        _unique([e.instance for e in endpoints], "endpoint for instance")
        return endpoints

    @field_validator("bindings")
    @classmethod
    def _one_binding_per_action(
        cls, bindings: tuple[ConnectorBinding, ...]
    ) -> tuple[ConnectorBinding, ...]:
        _unique([b.action for b in bindings], "binding for action")
        return bindings

    @classmethod
    def from_yaml(cls, text: str) -> ConnectorsConfig:
        """Parse the ``connectors:`` section of a YAML document.

        Raises:
            ConnectorsConfigError: The YAML or a declaration is malformed.
        """
        try:
            import yaml  # here, not at import time: only YAML-declared hosts need PyYAML
        except ImportError as exc:
            raise ConnectorsConfigError("reading connectors YAML needs PyYAML") from exc
        try:
            document: object = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConnectorsConfigError(f"connectors YAML does not parse: {exc}") from exc
        section: object = None
        if isinstance(document, Mapping):
            section = cast(Mapping[str, object], document).get("connectors")
        if not isinstance(section, Mapping):
            raise ConnectorsConfigError("the YAML has no `connectors:` mapping")
        try:
            return cls.model_validate(section)
        except ValidationError as exc:
            raise ConnectorsConfigError(f"connectors YAML is invalid: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> ConnectorsConfig:
        """Read and parse a YAML file (see :meth:`from_yaml`)."""
        return cls.from_yaml(Path(path).read_text(encoding="utf-8"))


def _unique(keys: list[str], what: str) -> None:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise ValueError(f"more than one {what} {key!r}")
        seen.add(key)


class CredentialResolver(abc.ABC):
    """Turns a credential reference into the credential the Connectors service expects.

    Contract: answers ``None`` when the reference does not resolve; never returns an empty
    string as a credential. It is asked before every invocation, so rotation takes effect on
    the next one. An exception it raises counts as "does not resolve".
    """

    @abc.abstractmethod
    async def resolve(self, reference: str) -> str | None:
        """The credential ``reference`` names, or ``None``."""


class EnvCredentialResolver(CredentialResolver):
    """Resolves ``env:NAME`` from the process environment."""

    async def resolve(self, reference: str) -> str | None:
        scheme, _, name = reference.partition(":")
        if scheme != "env" or not name:
            return None
        return os.environ.get(name) or None


class MappingCredentialResolver(CredentialResolver):
    """Resolves references from a fixed mapping (tests, or secrets loaded at start-up)."""

    def __init__(self, credentials: Mapping[str, str]) -> None:
        self._credentials = dict(credentials)

    async def resolve(self, reference: str) -> str | None:
        return self._credentials.get(reference) or None
