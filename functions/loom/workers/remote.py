"""``RemoteWorkerRuntime``: the ``WorkerRuntime`` SPI over HTTP (ADR 0002).

``execute`` POSTs ``{"executionPackage": ...}`` to ``{base_url}/execute`` and parses the
:class:`~loom.wire.ExecutionResult` the worker answers. The worker keeps nothing between
calls, so there is nothing to allocate or release here. Swapping a
:class:`~loom.workers.local.LocalWorkerRuntime` for this class is all it takes to move
execution to another process: the dispatcher around it does not change.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import ValidationError

from loom.errors import ExecutionSupersededError, RemoteWorkerError, WorkerError
from loom.telemetry import outgoing_headers
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.base import WorkerRuntime

DEFAULT_TIMEOUT = 900.0  # an execute call may run effects for minutes; Cloud Run allows 60


class RemoteWorkerRuntime(WorkerRuntime):
    """Runs execution packages on an HTTP worker (``loom serve`` or the ``worker`` target).

    Args:
        base_url: The worker's URL; a trailing slash is ignored.
        client: The HTTP client to use (inject one with an ``httpx.MockTransport`` in tests,
            or with auth and proxies configured). Closed by :meth:`aclose` only if this
            object created it.
        timeout: Seconds per call for the client this object creates.
    """

    def __init__(
        self,
        base_url: str,
        client: httpx.AsyncClient | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client
        self._owns_client = client is None
        self._timeout = timeout

    @property
    def execute_url(self) -> str:
        """Where packages are POSTed."""
        return f"{self.base_url}/execute"

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client, created on first use (so it binds to the loop that uses it)."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)
        return self._client

    async def request_headers(self, package: ExecutionPackage) -> dict[str, str]:
        """Headers for one call; a subclass adds credentials (an ID token for Cloud Run)."""
        return {}

    async def allocate(self, package: ExecutionPackage) -> Any:
        return self.base_url

    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        """POST the package and parse the result.

        Raises:
            ExecutionSupersededError: The worker answered 409 ``{"code": "superseded"}``.
            RemoteWorkerError: Any other non-2xx answer, or a 2xx that is not a result.
            WorkerError: The worker could not be reached.
        """
        body = {"executionPackage": package.model_dump(mode="json")}
        try:
            headers = {**outgoing_headers(), **await self.request_headers(package)}
            response = await self.client.post(self.execute_url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise WorkerError(
                f"worker at {self.execute_url} unreachable: {type(exc).__name__}: {exc}",
                details={"url": self.execute_url, "execution_id": package.execution_id},
            ) from exc
        return _parse(response, package)

    async def release(self, handle: Any) -> None:
        return None

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None


def _error_body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}  # type: ignore[return-value]


def _parse(response: httpx.Response, package: ExecutionPackage) -> ExecutionResult:
    status = response.status_code
    if status == 409:
        error = _error_body(response)
        if error.get("code") == "superseded":
            details = error.get("details")
            raise ExecutionSupersededError(
                str(error.get("message") or f"execution {package.execution_id!r} superseded"),
                details=details if isinstance(details, dict) else {},  # type: ignore[arg-type]
            )
    if not 200 <= status < 300:
        raise RemoteWorkerError(
            f"worker answered {status} for {package.execution_id!r}: {response.text[:200]}",
            status=status,
            body=response.text,
        )
    try:
        result = ExecutionResult.model_validate_json(response.content)
    except ValidationError as exc:
        raise RemoteWorkerError(
            f"worker answered {status} with something that is not an ExecutionResult: "
            f"{exc.error_count()} error(s)",
            status=status,
            body=response.text,
        ) from None
    if result.execution_id != package.execution_id:
        # A misrouted or forged answer: where another execution stands is not this one's
        # (a dispatcher would arm this execution's timer from another's wake_at).
        raise RemoteWorkerError(
            f"worker answered {status} with the result of {result.execution_id!r}, not of "
            f"{package.execution_id!r}",
            status=status,
            body=response.text,
        )
    return result
