"""``CloudRunWorkerRuntime``: a :class:`~loom.workers.remote.RemoteWorkerRuntime` for a
private Cloud Run service.

On top of the plain HTTP worker runtime it

* resolves the service's URL with the Cloud Run Admin API (``GetService``, which needs the
  ``run.services.get`` permission on the service, e.g. ``roles/run.viewer``), and refuses
  it only when that URL routes to no ready revision (a service whose first deploy has not
  succeeded). During a rollout, and after a failed deploy, traffic still goes to the last
  ready revision (``traffic_statuses``, ``latest_ready_revision``), so the URL is used;
* attaches a Google ID token whose audience is that URL, which Cloud Run's IAM check
  (``roles/run.invoker``) requires of a private service; tokens come from ``google-auth``
  (a service-account key file, or the metadata server on Google Cloud) and are cached until
  they near expiry;
* retries the answers of a cold start or a saturated service, 429 and 503, with
  exponential backoff and jitter.

Everything else (409 → superseded, other non-2xx → ``RemoteWorkerError``) is the plain
runtime's behaviour. The Admin API client and ``google-auth`` are synchronous; they run in
worker threads so the runtime can serve any event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import grpc
import httpx
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.auth.credentials import Credentials
from google.auth.transport.requests import Request
from google.cloud import run_v2
from google.cloud.run_v2.services.services.transports import ServicesGrpcTransport
from google.oauth2 import id_token

from loom.errors import ConfigurationError, RemoteWorkerError, WorkerError
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.remote import DEFAULT_TIMEOUT, RemoteWorkerRuntime

log = logging.getLogger("loom.cloud_run")

RETRY_STATUSES = frozenset({429, 503})
ADMIN_HOST_ENV = "LOOM_RUN_ADMIN_HOST"
_SERVICE = re.compile(r"^projects/[^/]+/locations/[^/]+/services/[a-z][a-z0-9-]*$")
_CONFIG_ERRORS = (gexc.NotFound, gexc.PermissionDenied, gexc.InvalidArgument, gexc.Unauthenticated)


class ServiceNotReadyError(WorkerError):
    """The Cloud Run service exists but its URL routes to no ready revision."""

    code = "service_not_ready"


def parse_service_url(url: str) -> str:
    """``cloudrun://projects/P/locations/L/services/S`` → the service's full name.

    Raises:
        ConfigurationError: Not such a URL.
    """
    scheme, sep, rest = url.partition("://")
    name = rest.strip("/")
    if scheme != "cloudrun" or not sep or not _SERVICE.match(name):
        raise ConfigurationError(
            f"expected cloudrun://projects/PROJECT/locations/REGION/services/SERVICE, got {url!r}"
        )
    return name


def serving_revisions(service: run_v2.Service) -> list[str]:
    """The revisions the service URL sends traffic to now (``traffic_statuses``).

    A ``LATEST`` entry serves the latest *ready* revision, which during a rollout or after a
    failed deploy is still the previous one.
    """
    revisions: list[str] = []
    latest = run_v2.TrafficTargetAllocationType.TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST
    for status in service.traffic_statuses:
        revision = status.revision or (
            service.latest_ready_revision if status.type_ == latest else ""
        )
        if status.percent > 0 and revision and revision not in revisions:
            revisions.append(revision)
    if not revisions and not service.traffic_statuses and service.latest_ready_revision:
        revisions.append(service.latest_ready_revision)  # traffic not reported: all to latest
    return revisions


def readiness(service: run_v2.Service) -> str | None:
    """Why requests to ``service``'s URL cannot be served, or ``None`` if they can.

    What matters is whether the URL routes to a revision that is ready, not whether the
    newest generation is: during a rollout, and after a deploy that failed, traffic keeps
    going to the last ready revision.
    """
    if not service.uri:
        return "the service has no URL"
    if not serving_revisions(service):
        condition = service.terminal_condition
        state = run_v2.Condition.State(condition.state).name
        return (
            f"no ready revision serves its traffic yet (terminal condition {state}: "
            f"{condition.message or 'no message'})"
        )
    return None


def rollout_note(service: run_v2.Service) -> str | None:
    """Why the newest generation is not the one serving, if it is not (for the logs)."""
    condition = service.terminal_condition
    if condition.state != run_v2.Condition.State.CONDITION_SUCCEEDED:
        state = run_v2.Condition.State(condition.state).name
        return f"terminal condition is {state}: {condition.message or 'no message'}"
    if service.observed_generation != service.generation:
        return (
            f"generation {service.generation} rolling out (observed {service.observed_generation})"
        )
    return None


class IdTokenSource:
    """Google ID tokens for audiences, each cached until it nears expiry.

    Args:
        request: The ``google-auth`` transport used to mint tokens; default a new
            ``requests``-based one.
    """

    def __init__(self, request: Request | None = None) -> None:
        self._request = request or Request()
        self._credentials: dict[str, Credentials] = {}
        self._lock = threading.Lock()

    def token(self, audience: str) -> str:
        """A valid ID token for ``audience`` (blocking: call it from a thread).

        Raises:
            ConfigurationError: No credentials can mint ID tokens here.
            WorkerError: The token endpoint failed.
        """
        with self._lock:
            try:
                creds = self._credentials.get(audience)
                if creds is None:
                    creds = id_token.fetch_id_token_credentials(audience, request=self._request)
                    self._credentials[audience] = creds
                if not creds.valid:
                    creds.refresh(self._request)
            except auth_exc.DefaultCredentialsError as exc:
                raise ConfigurationError(f"no credentials for ID tokens: {exc}") from exc
            except auth_exc.GoogleAuthError as exc:
                raise WorkerError(f"could not mint an ID token for {audience}: {exc}") from exc
            token = cast("str | None", creds.token)
        if not token:
            raise WorkerError(f"google-auth gave no ID token for {audience}")
        return token


def admin_client(host: str | None = None) -> run_v2.ServicesClient:
    """A Cloud Run Admin API client; with ``host`` (or ``LOOM_RUN_ADMIN_HOST``), plain gRPC
    to a local fake instead of Google's endpoint with default credentials."""
    host = host or os.environ.get(ADMIN_HOST_ENV)
    if host:
        transport = ServicesGrpcTransport(channel=grpc.insecure_channel(host))
        return run_v2.ServicesClient(transport=transport)
    try:
        return run_v2.ServicesClient()
    except auth_exc.DefaultCredentialsError as exc:
        raise ConfigurationError(f"no Google credentials for the Cloud Run API: {exc}") from exc


class CloudRunWorkerRuntime(RemoteWorkerRuntime):
    """Runs execution packages on a private Cloud Run service (see the module docstring).

    Args:
        service: ``projects/P/locations/L/services/S``.
        services_client: A Cloud Run Admin API client; default :func:`admin_client`, created
            on first use.
        id_tokens: Where ID tokens come from; default an :class:`IdTokenSource`.
        audience: The ID token's audience; default the service URL.
        client: The HTTP client (see :class:`RemoteWorkerRuntime`).
        timeout: Seconds per call for the client this object creates.
        attempts: Calls in all while the service answers 429 or 503.
        backoff: Seconds before the second call; doubled after each, up to ``max_backoff``,
            jittered.
        max_backoff: Upper bound of one wait.
        refresh_after: Seconds a resolved URL is trusted before asking the API again.
        sleep: Awaited between attempts (injectable for tests).
    """

    def __init__(
        self,
        service: str,
        *,
        services_client: run_v2.ServicesClient | None = None,
        id_tokens: IdTokenSource | None = None,
        audience: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        attempts: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        refresh_after: float = 300.0,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        super().__init__("", client, timeout=timeout)
        self.service = parse_service_url(f"cloudrun://{service}")
        self._services = services_client
        self._tokens = id_tokens or IdTokenSource()
        self._audience = audience
        self.attempts = max(1, attempts)
        self.backoff, self.max_backoff = backoff, max_backoff
        self.refresh_after = refresh_after
        self._sleep = sleep
        self._resolved_at = float("-inf")
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> CloudRunWorkerRuntime:
        """Build from ``cloudrun://projects/P/locations/L/services/S``."""
        return cls(parse_service_url(url))

    @property
    def audience(self) -> str:
        """The ID token audience: the one given, else the resolved service URL."""
        return self._audience or self.base_url

    # -- resolving the service -------------------------------------------------------------

    async def resolve(self) -> str:
        """The service URL, from the Admin API (cached ``refresh_after`` seconds).

        Raises:
            ServiceNotReadyError: The service is not ready (see :func:`readiness`).
            ConfigurationError: No such service, or no permission to read it.
            WorkerError: The Admin API failed.
        """
        if self.base_url and time.monotonic() - self._resolved_at < self.refresh_after:
            return self.base_url
        service = await asyncio.to_thread(self._get_service)
        reason = readiness(service)
        if reason is not None:
            raise ServiceNotReadyError(
                f"Cloud Run service {self.service} is not ready: {reason}",
                details={"service": self.service},
            )
        note = rollout_note(service)
        if note is not None:
            log.info(
                "Cloud Run service %s: %s; serving through %s",
                self.service,
                note,
                ", ".join(serving_revisions(service)),
            )
        self.base_url = service.uri.rstrip("/")
        self._resolved_at = time.monotonic()
        return self.base_url

    def _get_service(self) -> run_v2.Service:
        with self._lock:
            if self._services is None:
                self._services = admin_client()
            services = self._services
        try:
            return services.get_service(name=self.service, timeout=30.0)
        except _CONFIG_ERRORS as exc:
            raise ConfigurationError(
                f"cannot read Cloud Run service {self.service}: {exc}",
                details={"service": self.service},
            ) from exc
        except gexc.GoogleAPIError as exc:
            raise WorkerError(f"Cloud Run Admin API failed for {self.service}: {exc}") from exc

    # -- the SPI ---------------------------------------------------------------------------

    async def allocate(self, package: ExecutionPackage) -> Any:
        return await self.resolve()

    async def request_headers(self, package: ExecutionPackage) -> dict[str, str]:
        token = await asyncio.to_thread(self._tokens.token, self.audience)
        return {"Authorization": f"Bearer {token}"}

    async def execute(self, handle: Any, package: ExecutionPackage) -> ExecutionResult:
        """POST the package; on 429/503 wait and try again, up to ``attempts`` calls.

        Raises:
            ExecutionSupersededError: The worker answered 409 superseded.
            RemoteWorkerError: Another non-2xx, or 429/503 on the last attempt.
            WorkerError: The service could not be reached.
        """
        if not self.base_url:
            await self.resolve()
        for attempt in range(1, self.attempts + 1):
            try:
                return await super().execute(handle, package)
            except RemoteWorkerError as exc:
                if exc.status not in RETRY_STATUSES or attempt == self.attempts:
                    raise
            await self._sleep(self.delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based), jittered in the upper
        half of the exponential step so concurrent callers spread out."""
        ceiling = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)

    async def aclose(self) -> None:
        await super().aclose()
        services, self._services = self._services, None
        if services is not None:
            await asyncio.to_thread(services.transport.close)
