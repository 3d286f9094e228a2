"""``CloudTasksDispatcher``: every dispatch becomes one Cloud Tasks task.

``cloudtasks://projects/P/locations/L/queues/Q`` names the queue, or a family of queues by
class and shard (``…/queues/PREFIX?executions=64&timers=8&admission=4&maintenance=2``, see
:mod:`loom_gcp._task_queues`); the task is an HTTP ``POST`` of
``{"executionPackage": ..., "notBefore": ...}`` to the worker's ``/tasks/execute`` (see
:mod:`loom.workers.tasks_target`), or, for a job (:mod:`loom.kernel.jobs`), of ``{"job": ...}`` to
``/tasks/job``.

* **One task per dispatch, deduplicated by name.** The task id is the SHA-256 of the
  dispatch id (``{execution_id}:{seq}`` of the event that caused it), so the same cause
  dispatched twice names the same task and Cloud Tasks answers ``ALREADY_EXISTS``, which
  counts as success. Hashing, rather than using the id itself, spreads names evenly (Cloud
  Tasks slows down on sequential names) and keeps them within the allowed alphabet. Names are
  reserved only for about an hour after a task ran, so this is deduplication, not the
  idempotency guard: the log append is.
* **Durable timers** are tasks with a ``schedule_time``. Cloud Tasks refuses a schedule time
  more than 30 days ahead, so a later timer is scheduled at the horizon with its real time in
  ``notBefore``; the handler sees it early and dispatches it again (a re-arm).
* **OIDC**: with a service account, every task carries an OIDC token minted for that account
  whose audience is the worker's service URL, which Cloud Run checks before the request
  reaches the code.
* **Trace context**: a task carries the dispatching call's ``traceparent`` (when the process
  uses OpenTelemetry), so the execute it delivers continues the same trace.
* **Dispatch deadline**: how long Cloud Tasks waits for one attempt (15 s to 30 min); after
  that it retries, possibly while the first attempt still runs — harmless, since the log
  append fences overlapping holders.

The Cloud Tasks client is the synchronous one, called from worker threads: its gRPC channel
is not bound to an event loop, so one dispatcher serves any number of ``asyncio.run`` calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth import exceptions as auth_exc
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport
from google.protobuf import duration_pb2, timestamp_pb2

from loom.dispatch.base import Dispatcher
from loom.errors import ConfigurationError, LoomError
from loom.kernel.jobs import Job
from loom.telemetry import outgoing_headers
from loom.wire import ExecutionPackage
from loom_gcp._task_queues import TaskQueues

log = logging.getLogger("loom.dispatch")

TASKS_PATH = "/tasks/execute"
JOBS_PATH = "/tasks/job"
MAX_SCHEDULE_AHEAD = 30 * 24 * 3600.0
# Stay an hour inside Cloud Tasks' limit so clock skew never makes it refuse a task.
DEFAULT_HORIZON = MAX_SCHEDULE_AHEAD - 3600.0
DEFAULT_DEADLINE = 600.0
MIN_DEADLINE, MAX_DEADLINE = 15.0, 1800.0
EMULATOR_ENV = "CLOUD_TASKS_EMULATOR_HOST"
# CreateTask is not idempotent in general, but with a named task a retry that meets the
# first attempt's task answers ALREADY_EXISTS, which is success here: retrying is safe.
_RETRY = gretry.Retry(
    initial=0.1,
    maximum=2.0,
    multiplier=2.0,
    timeout=30.0,
    predicate=gretry.if_exception_type(
        gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError
    ),
)
_CONFIG_ERRORS = (
    gexc.NotFound,
    gexc.PermissionDenied,
    gexc.InvalidArgument,
    gexc.FailedPrecondition,
    gexc.Unauthenticated,
)


class CloudTasksError(LoomError):
    """Cloud Tasks did not take a task (after the client's retries)."""

    code = "dispatch_failed"


def task_id(dispatch_id: str) -> str:
    """The task id for a dispatch id: its SHA-256, hex (64 characters)."""
    return hashlib.sha256(dispatch_id.encode("utf-8")).hexdigest()


def parse_queue_url(url: str) -> str:
    """``cloudtasks://projects/P/locations/L/queues/Q`` → ``projects/P/locations/L/queues/Q``
    (the first queue of a family).

    Raises:
        ConfigurationError: Not such a URL.
    """
    return TaskQueues.parse(url).all[0]


def normalize_target(url: str) -> tuple[str, str]:
    """The URL tasks are POSTed to, and its origin (the default OIDC audience).

    A URL with no path gets :data:`TASKS_PATH`, so ``LOOM_TASKS_TARGET_URL`` may name either
    the service or the endpoint.

    Raises:
        ConfigurationError: Not an absolute http(s) URL.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(f"tasks target must be an http(s) URL, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else TASKS_PATH
    origin = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, "")), origin


def _timestamp(epoch: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.fromtimestamp(epoch, UTC))
    return stamp


def _duration(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromTimedelta(timedelta(seconds=seconds))
    return duration


def _check_deadline(seconds: float) -> float:
    if not MIN_DEADLINE <= seconds <= MAX_DEADLINE:
        raise ConfigurationError(
            f"dispatch deadline must be {MIN_DEADLINE:.0f}-{MAX_DEADLINE:.0f} s, got {seconds}"
        )
    return seconds


def emulator_client(host: str) -> tasks_v2.CloudTasksClient:
    """A client for a Cloud Tasks emulator at ``host:port`` (plain gRPC, no credentials)."""
    transport = CloudTasksGrpcTransport(channel=grpc.insecure_channel(host))
    return tasks_v2.CloudTasksClient(transport=transport)


class CloudTasksDispatcher(Dispatcher):
    """A :class:`~loom.dispatch.base.Dispatcher` that creates one Cloud Tasks task per dispatch.

    Args:
        queue: ``projects/P/locations/L/queues/Q``, or a family's prefix with its counts
            (``projects/P/locations/L/queues/PREFIX?executions=64&…``, see
            :mod:`loom_gcp._task_queues`).
        target_url: Where tasks are POSTed (a URL with no path gets ``/tasks/execute``).
        service_account: Email of the account whose OIDC token each task carries; ``None``
            sends no token (only for a public target or an emulator).
        audience: The token's audience; default the target URL's origin (the Cloud Run
            service URL).
        dispatch_deadline: Seconds Cloud Tasks waits for one attempt (15-1800).
        client: A Cloud Tasks client (not closed by :meth:`aclose`); default: created on first
            use, from ``CLOUD_TASKS_EMULATOR_HOST`` if set, else with default credentials.
        clock: Wall-clock seconds, to decide what is "now" and what is beyond the horizon.
        horizon: Seconds ahead beyond which a timer is re-armed instead of scheduled.
    """

    def __init__(
        self,
        queue: str,
        target_url: str,
        *,
        service_account: str | None = None,
        audience: str | None = None,
        dispatch_deadline: float = DEFAULT_DEADLINE,
        client: tasks_v2.CloudTasksClient | None = None,
        clock: Callable[[], float] = time.time,
        horizon: float = DEFAULT_HORIZON,
    ) -> None:
        self.queues = TaskQueues.parse(f"cloudtasks://{queue}")
        self.queue = self.queues.all[0]  # the one queue (or a family's first)
        self.target_url, origin = normalize_target(target_url)
        self.job_url = f"{origin}{JOBS_PATH}"
        self.service_account = service_account or None
        self.audience = audience or origin
        self.dispatch_deadline = _check_deadline(dispatch_deadline)
        self.clock = clock
        self.horizon = min(horizon, MAX_SCHEDULE_AHEAD)
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, env: Mapping[str, str] | None = None) -> CloudTasksDispatcher:
        """Build from ``cloudtasks://projects/P/locations/L/queues/Q`` and the environment.

        ``LOOM_TASKS_TARGET_URL`` (required), ``LOOM_TASKS_SERVICE_ACCOUNT``,
        ``LOOM_TASKS_AUDIENCE`` and ``LOOM_TASKS_DISPATCH_DEADLINE`` (seconds).

        Raises:
            ConfigurationError: A malformed URL, a missing target or a bad deadline.
        """
        env = os.environ if env is None else env
        queues = TaskQueues.parse(url)
        queue = url.split("://", 1)[1] if queues.counts else queues.all[0]
        target = env.get("LOOM_TASKS_TARGET_URL")
        if not target:
            raise ConfigurationError(
                f"{url} needs LOOM_TASKS_TARGET_URL: the URL of the service serving /tasks/execute"
            )
        deadline = env.get("LOOM_TASKS_DISPATCH_DEADLINE") or str(DEFAULT_DEADLINE)
        try:
            seconds = float(deadline)
        except ValueError:
            raise ConfigurationError(
                f"LOOM_TASKS_DISPATCH_DEADLINE must be seconds, got {deadline!r}"
            ) from None
        return cls(
            queue,
            target,
            service_account=env.get("LOOM_TASKS_SERVICE_ACCOUNT"),
            audience=env.get("LOOM_TASKS_AUDIENCE"),
            dispatch_deadline=seconds,
        )

    # -- the task --------------------------------------------------------------------------

    def task_name(self, dispatch_id: str, queue: str | None = None) -> str:
        """The full task name for a dispatch id (in ``queue``, default the first)."""
        return f"{queue or self.queue}/tasks/{task_id(dispatch_id)}"

    def queue_of(self, package: ExecutionPackage, not_before: float | None = None) -> str:
        """The queue a dispatch of ``package`` goes to: ``timers`` when it waits for a
        time, else ``executions``; by the execution's shard within the class."""
        klass = "timers" if self._schedule_time(not_before) is not None else "executions"
        return self.queues.for_execution(package.execution_id, klass)

    def build_task(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> tasks_v2.Task:
        """The task that delivers ``package`` (pure: no I/O), see the module docstring."""
        package = package.model_copy(update={"dispatch_id": dispatch_id})
        body = {"executionPackage": package.model_dump(mode="json"), "notBefore": not_before}
        name = self.task_name(dispatch_id, self.queue_of(package, not_before))
        return self._task(name, self.target_url, body, not_before)

    def build_job_task(self, job: Job, not_before: float | None = None) -> tasks_v2.Task:
        """The task that runs ``job`` (pure: no I/O): a ``POST /tasks/job`` on a queue of
        the job's class, routed by its shard, named by the hash of its id."""
        queue = self.queues.for_job(job.task_class, job.shard)
        name = self.task_name(job.job_id, queue)
        return self._task(name, self.job_url, {"job": job.to_json()}, not_before)

    def _task(
        self, name: str, url: str, body: dict[str, Any], not_before: float | None
    ) -> tasks_v2.Task:
        request = tasks_v2.HttpRequest(
            url=url,
            http_method=tasks_v2.HttpMethod.POST,
            headers={"Content-Type": "application/json", **outgoing_headers()},
            body=json.dumps(body, separators=(",", ":")).encode("utf-8"),
        )
        if self.service_account:
            request.oidc_token = tasks_v2.OidcToken(
                service_account_email=self.service_account, audience=self.audience
            )
        task = tasks_v2.Task(
            name=name,
            http_request=request,
            dispatch_deadline=_duration(self.dispatch_deadline),
        )
        schedule = self._schedule_time(not_before)
        if schedule is not None:
            task.schedule_time = _timestamp(schedule)
        return task

    def _schedule_time(self, not_before: float | None) -> float | None:
        """When the task should run: ``None`` (now), the timer, or the horizon (re-arm)."""
        if not_before is None:
            return None
        now = self.clock()
        if not_before <= now:
            return None
        return min(not_before, now + self.horizon)

    # -- the SPI ---------------------------------------------------------------------------

    @property
    def client(self) -> tasks_v2.CloudTasksClient:
        """The Cloud Tasks client, created on first use."""
        with self._lock:
            if self._client is None:
                self._client = _default_client()
            return self._client

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        """Create the task; an existing task of the same name counts as done.

        Raises:
            ConfigurationError: The queue is missing or we may not use it.
            CloudTasksError: Cloud Tasks kept failing.
        """
        task = self.build_task(package, dispatch_id, not_before)
        await asyncio.to_thread(self._create, task, package.execution_id, dispatch_id)

    carries_jobs = True

    async def dispatch_job(self, job: Job, not_before: float | None = None) -> None:
        """Create the job's task; an existing task of the same name counts as done.

        Raises:
            ConfigurationError: The queue is missing or we may not use it.
            CloudTasksError: Cloud Tasks kept failing.
        """
        task = self.build_job_task(job, not_before)
        await asyncio.to_thread(self._create, task, "-", job.job_id)

    def _create(self, task: tasks_v2.Task, execution_id: str, dispatch_id: str) -> None:
        parent = task.name.rsplit("/tasks/", 1)[0]
        try:
            self.client.create_task(parent=parent, task=task, retry=_RETRY, timeout=10.0)
        except gexc.AlreadyExists:
            log.debug(
                "task for %s exists already", dispatch_id, extra={"execution_id": execution_id}
            )
        except _CONFIG_ERRORS as exc:
            raise ConfigurationError(
                f"Cloud Tasks refused a task on {parent}: {exc}",
                details={"queue": parent, "dispatch_id": dispatch_id},
            ) from exc
        except (gexc.GoogleAPIError, auth_exc.GoogleAuthError) as exc:
            raise CloudTasksError(
                f"Cloud Tasks did not take the task for {dispatch_id!r}: {exc}",
                details={"queue": parent, "dispatch_id": dispatch_id},
            ) from exc

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.transport.close)


def _default_client() -> tasks_v2.CloudTasksClient:
    host = os.environ.get(EMULATOR_ENV)
    if host:
        return emulator_client(host)
    try:
        return tasks_v2.CloudTasksClient()
    except auth_exc.DefaultCredentialsError as exc:
        raise ConfigurationError(f"no Google credentials for Cloud Tasks: {exc}") from exc
