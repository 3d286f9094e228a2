"""``ConnectorEffects``: the effect port for actions bound to Connector operations."""

from __future__ import annotations

from collections.abc import Iterable

from loom.commission.admission import AdmittedRequest, require_admitted
from loom.commission.connectors.config import (
    ConnectorBinding,
    ConnectorsConfig,
    CredentialResolver,
)
from loom.commission.connectors.invoker import ConnectorCall, ConnectorInvoker, ConnectorsInvoker
from loom.commission.errors import ConnectorError
from loom.commission.model import Assigned, Commission
from loom.commission.ports import EffectOutcome, EffectPort


class ConnectorEffects(EffectPort):
    """Performs the actions bound to Connector operations, through a ``ConnectorInvoker``.

    The request id is the call's idempotency key; the commission, case, revision and action go
    along as context for the service's audit. The port holds the invoker: executors never see
    it, nor any credential.

    Args:
        invoker: Invokes the bound operations.
        bindings: One per action this port performs.
    """

    def __init__(self, invoker: ConnectorInvoker, bindings: Iterable[ConnectorBinding]) -> None:
        self._invoker = invoker
        self._bindings = {binding.action: binding for binding in bindings}

    @classmethod
    def from_config(
        cls, config: ConnectorsConfig, resolver: CredentialResolver
    ) -> ConnectorEffects:
        """A port over a :class:`ConnectorsInvoker` built from the host's declarations."""
        return cls(ConnectorsInvoker(config.endpoints, resolver), config.bindings)

    def performs(self, action: str) -> bool:
        return action in self._bindings

    async def invoke(
        self, commission: Commission[Assigned], request: AdmittedRequest
    ) -> EffectOutcome:
        require_admitted(request)
        binding = self._bindings.get(request.action_id)
        if binding is None:
            raise ConnectorError(f"{request.action_id!r} is not bound", reason="unbound")
        call = ConnectorCall(
            input=request.args,
            idempotency_key=request.request_id,
            context={
                "commission_id": commission.commission_id,
                "assignee": commission.state.assignee,
                "case_id": request.case_id,
                "revision": request.revision,
                "action_id": request.action_id,
            },
        )
        return await self._invoker.invoke(binding, call)

    async def aclose(self) -> None:
        await self._invoker.aclose()
