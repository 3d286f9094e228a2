"""Commission effects through a Connectors service (ADR 0009)."""

from loom.commission.connectors.config import (
    ConnectorBinding,
    ConnectorEndpoint,
    ConnectorsConfig,
    CredentialResolver,
    Effect,
    EnvCredentialResolver,
    MappingCredentialResolver,
)
from loom.commission.connectors.effects import ConnectorEffects
from loom.commission.connectors.invoker import ConnectorCall, ConnectorInvoker, ConnectorsInvoker
from loom.commission.connectors.wire import InvokeAnswer, map_answer

__all__ = [
    "ConnectorBinding",
    "ConnectorCall",
    "ConnectorEffects",
    "ConnectorEndpoint",
    "ConnectorInvoker",
    "ConnectorsConfig",
    "ConnectorsInvoker",
    "CredentialResolver",
    "Effect",
    "EnvCredentialResolver",
    "InvokeAnswer",
    "MappingCredentialResolver",
    "map_answer",
]
