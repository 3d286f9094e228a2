"""``ConnectorInvoker`` (the port ``ConnectorEffects`` calls) and ``ConnectorsInvoker`` over HTTP.

``ConnectorsInvoker`` checks, in order and before anything is invoked: that the binding's
instance has a declared endpoint, that its URL is https (or http where admitted), that the
credential resolves, that the service describes itself as that instance, and that it describes
the bound operation with the effect the binding declares. Each failure is ``Err``
(:class:`~loom.commission.errors.ConnectorError`), and the first three send nothing at all.
Then it invokes the operation exactly once: no retry, no redirect, no other endpoint.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from loom.commission.connectors.config import (
    ConnectorBinding,
    ConnectorEndpoint,
    CredentialResolver,
)
from loom.commission.connectors.wire import (
    API_VERSION,
    DESCRIBE_PATH,
    INVOKE_PATH,
    Description,
    InvokeAnswer,
    InvokeCall,
    map_answer,
)
from loom.commission.errors import ConnectorError
from loom.commission.ports import EffectOutcome

M = TypeVar("M", bound=BaseModel)


class ConnectorCall(BaseModel):
    """One invocation of a bound operation.

    Attributes:
        input: The operation's JSON input (the action's arguments).
        idempotency_key: The Commission request id.
        context: Facts for the service's audit (commission, case, revision, action).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])
    idempotency_key: str
    context: dict[str, JsonValue] = Field(default_factory=dict[str, JsonValue])


class ConnectorInvoker(abc.ABC):
    """Invokes a bound Connector operation.

    Contract: one call to ``invoke`` invokes the operation at most once. It never falls back to
    another endpoint or operation and never resends. It answers ``Performed`` (naming what was
    performed) or ``Refused`` (nothing performed), or raises ``ConnectorError``.
    """

    @abc.abstractmethod
    async def invoke(self, binding: ConnectorBinding, call: ConnectorCall) -> EffectOutcome:
        """Invoke ``binding``'s operation with ``call``.

        Raises:
            ConnectorError: The invoker's ``Err`` (see ADR 0009's table).
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Default: nothing."""


class ConnectorsInvoker(ConnectorInvoker):
    """Invokes operations on Connectors services over HTTP (``v1alpha2``, ADR 0009).

    Args:
        endpoints: One per Connector instance.
        resolver: Turns each endpoint's credential reference into its bearer credential.
        client: The HTTP client (injectable, e.g. for a proxy or a test transport). Redirects
            are never followed, whatever the client's setting; its transport must not retry.
    """

    def __init__(
        self,
        endpoints: Iterable[ConnectorEndpoint],
        resolver: CredentialResolver,
        *,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._endpoints = {endpoint.instance: endpoint for endpoint in endpoints}
        self._resolver = resolver
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def invoke(self, binding: ConnectorBinding, call: ConnectorCall) -> EffectOutcome:
        endpoint = self._endpoint(binding)
        base = _base_url(endpoint)
        headers = {"Authorization": f"Bearer {await self._credential(endpoint)}"}
        description = await self._describe(endpoint, base, headers)
        _check(endpoint, binding, description)
        body = InvokeCall(
            instance=endpoint.instance,
            operation=binding.operation,
            input=call.input,
            idempotency_key=call.idempotency_key,
            context=call.context,
        )
        answer = await self._send(
            "invoke", endpoint, "POST", base + INVOKE_PATH, headers, body.model_dump(mode="json")
        )
        return map_answer(_parse(InvokeAnswer, answer, "invoke"), binding.effect)

    def _endpoint(self, binding: ConnectorBinding) -> ConnectorEndpoint:
        endpoint = self._endpoints.get(binding.instance)
        if endpoint is None:
            raise ConnectorError(
                f"no endpoint is declared for instance {binding.instance!r}",
                reason="no_endpoint",
                details={"instance": binding.instance},
            )
        return endpoint

    async def _credential(self, endpoint: ConnectorEndpoint) -> str:
        try:
            credential = await self._resolver.resolve(endpoint.credential)
        except Exception:  # the contract: a failing resolver does not resolve
            credential = None
        if not credential:
            raise ConnectorError(
                f"the credential of instance {endpoint.instance!r} does not resolve",
                reason="credential_unresolved",
                details={"instance": endpoint.instance, "credential": endpoint.credential},
            )
        return credential

    async def _describe(
        self, endpoint: ConnectorEndpoint, base: str, headers: dict[str, str]
    ) -> Description:
        raw = await self._send("describe", endpoint, "GET", base + DESCRIBE_PATH, headers, None)
        description = _parse(Description, raw, "describe")
        if description.api != API_VERSION:
            raise ConnectorError(
                f"the service speaks {description.api!r}, not {API_VERSION!r}",
                reason="protocol",
                details={"phase": "describe"},
            )
        return description

    async def _send(
        self,
        phase: str,
        endpoint: ConnectorEndpoint,
        method: str,
        url: str,
        headers: dict[str, str],
        body: dict[str, Any] | None,
    ) -> bytes:
        """One request, sent once. A transport failure or a non-200 status is ``Err``."""
        details = {"phase": phase, "instance": endpoint.instance}
        try:
            response = await self._client.request(
                method,
                url,
                headers=headers,
                json=body,
                timeout=endpoint.timeout_s,
                follow_redirects=False,  # a followed redirect would resend the call elsewhere
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ConnectorError(
                f"{phase} on {endpoint.instance!r} failed in transport: {exc!r}",
                reason="transport",
                details=details,
            ) from exc
        if response.status_code != 200:
            raise ConnectorError(
                f"{phase} on {endpoint.instance!r} answered HTTP {response.status_code}",
                reason="protocol",
                details={**details, "status": response.status_code, "body": response.text[:500]},
            )
        return response.content


def _base_url(endpoint: ConnectorEndpoint) -> str:
    """The endpoint's URL without a trailing slash, if its scheme is admitted."""
    try:
        url = httpx.URL(endpoint.url)
    except httpx.InvalidURL as exc:
        raise ConnectorError(f"bad endpoint URL {endpoint.url!r}", reason="bad_url") from exc
    if url.scheme == "http" and not endpoint.allow_plain_http:
        raise ConnectorError(
            f"plain http is not admitted for instance {endpoint.instance!r}",
            reason="plain_http",
            details={"instance": endpoint.instance},
        )
    if url.scheme not in ("https", "http") or not url.host:
        raise ConnectorError(f"bad endpoint URL {endpoint.url!r}", reason="bad_url")
    return str(url).rstrip("/")


def _parse(model: type[M], raw: bytes, phase: str) -> M:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise ConnectorError(
            f"the service's {phase} answer is malformed: {exc.error_count()} error(s)",
            reason="protocol",
            details={"phase": phase, "body": raw[:500].decode("utf-8", "replace")},
        ) from exc


def _check(endpoint: ConnectorEndpoint, binding: ConnectorBinding, described: Description) -> None:
    """Refuse a service that is another instance, or describes the operation otherwise."""
    if described.instance != endpoint.instance:
        raise ConnectorError(
            f"the endpoint of {endpoint.instance!r} describes instance {described.instance!r}",
            reason="instance_mismatch",
            details={"declared": endpoint.instance, "described": described.instance},
        )
    operation = described.operations.get(binding.operation)
    if operation is None:
        raise ConnectorError(
            f"instance {endpoint.instance!r} describes no operation {binding.operation!r}",
            reason="unknown_operation",
            details={"operation": binding.operation},
        )
    if operation.effect != binding.effect:
        raise ConnectorError(
            f"{binding.operation!r} is bound as {binding.effect.value} but the service "
            f"describes it as {operation.effect.value} (profile {operation.profile!r})",
            reason="effect_mismatch",
            details={"declared": binding.effect.value, "described": operation.effect.value},
        )
