"""``CloudTasksDispatcher`` without a server: the task it builds and how it treats answers.

What the emulator cannot show (OIDC tokens, dispatch deadlines, the 30-day horizon, the
client's retry of CreateTask) is asserted here on the task and the calls themselves.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from google.api_core import exceptions as gexc
from google.cloud import tasks_v2

from loom.errors import ConfigurationError
from loom.wire import ExecutionPackage
from loom_gcp.cloud_tasks import (
    DEFAULT_HORIZON,
    CloudTasksDispatcher,
    CloudTasksError,
    parse_queue_url,
    task_id,
)

QUEUE = "projects/p1/locations/europe-west1/queues/loom"
NOW = 1_800_000_000.0
SA = "loom-invoker@p1.iam.gserviceaccount.com"


class RecordingClient:
    """Stands in for ``CloudTasksClient``: records tasks, answers like Cloud Tasks would."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.created: list[tuple[str, tasks_v2.Task, dict[str, Any]]] = []
        self.names: set[str] = set()
        self.fail_with = fail_with

    def create_task(self, *, parent: str, task: tasks_v2.Task, **kwargs: Any) -> tasks_v2.Task:
        if self.fail_with is not None:
            raise self.fail_with
        if task.name in self.names:
            raise gexc.AlreadyExists(f"task {task.name} exists")
        self.names.add(task.name)
        self.created.append((parent, task, kwargs))
        return task


def dispatcher(client: RecordingClient | None = None, **kwargs: Any) -> CloudTasksDispatcher:
    return CloudTasksDispatcher(
        QUEUE,
        "https://loom-tasks-abc-ew.a.run.app",
        service_account=SA,
        client=cast(tasks_v2.CloudTasksClient, client or RecordingClient()),
        clock=lambda: NOW,
        **kwargs,
    )


def package(eid: str = "order-1") -> ExecutionPackage:
    return ExecutionPackage(execution_id=eid, flow="order.fulfil", reason="start")


def test_a_task_is_named_by_the_hash_of_its_dispatch_id() -> None:
    task = dispatcher().build_task(package(), "order-1:1")
    digest = hashlib.sha256(b"order-1:1").hexdigest()
    assert task.name == f"{QUEUE}/tasks/{digest}"
    assert task_id("order-1:1") == digest
    assert dispatcher().build_task(package(), "order-1:2").name != task.name


def test_the_task_posts_the_package_as_json_to_the_tasks_endpoint() -> None:
    task = dispatcher().build_task(package(), "order-1:1")
    request = task.http_request
    assert request.url == "https://loom-tasks-abc-ew.a.run.app/tasks/execute"
    assert request.http_method == tasks_v2.HttpMethod.POST
    assert request.headers["Content-Type"] == "application/json"
    body = json.loads(request.body)
    assert body["executionPackage"] == {
        "execution_id": "order-1",
        "flow": "order.fulfil",
        "reason": "start",
        "dispatch_id": "order-1:1",
    }
    assert body["notBefore"] is None
    assert ExecutionPackage.model_validate(body["executionPackage"]).dispatch_id == "order-1:1"


def test_an_explicit_endpoint_path_is_kept() -> None:
    d = CloudTasksDispatcher(QUEUE, "http://127.0.0.1:9999/custom/path", client=cast(Any, 1))
    assert d.target_url == "http://127.0.0.1:9999/custom/path"
    assert d.audience == "http://127.0.0.1:9999"


def test_the_oidc_token_is_for_the_service_account_with_the_service_url_as_audience() -> None:
    token = dispatcher().build_task(package(), "order-1:1").http_request.oidc_token
    assert token.service_account_email == SA
    assert token.audience == "https://loom-tasks-abc-ew.a.run.app"
    custom = dispatcher(audience="https://custom.example").build_task(package(), "x:1")
    assert custom.http_request.oidc_token.audience == "https://custom.example"


def test_without_a_service_account_no_token_is_attached() -> None:
    d = CloudTasksDispatcher(QUEUE, "http://127.0.0.1:1", client=cast(Any, RecordingClient()))
    assert "oidc_token" not in d.build_task(package(), "x:1").http_request


def test_the_dispatch_deadline_is_set_and_checked() -> None:
    task = dispatcher(dispatch_deadline=120).build_task(package(), "order-1:1")
    assert task.dispatch_deadline.total_seconds() == 120
    assert dispatcher().build_task(package(), "x:1").dispatch_deadline.total_seconds() == 600
    for bad in (5.0, 3600.0):
        with pytest.raises(ConfigurationError, match="dispatch deadline"):
            dispatcher(dispatch_deadline=bad)


def test_an_immediate_dispatch_has_no_schedule_time_and_a_timer_has_its_wake_time() -> None:
    d = dispatcher()
    assert "schedule_time" not in d.build_task(package(), "x:1")
    assert "schedule_time" not in d.build_task(package(), "x:2", not_before=NOW - 5)
    timer = d.build_task(package(), "x:3:timer", not_before=NOW + 3600.5)
    assert timer.schedule_time == datetime.fromtimestamp(NOW + 3600.5, UTC)
    assert json.loads(timer.http_request.body)["notBefore"] == NOW + 3600.5


def test_a_timer_beyond_the_horizon_is_scheduled_at_the_horizon_with_its_real_time() -> None:
    wake = NOW + 45 * 24 * 3600
    task = dispatcher().build_task(package(), "x:7:timer", not_before=wake)
    assert task.schedule_time == datetime.fromtimestamp(NOW + DEFAULT_HORIZON, UTC)
    assert DEFAULT_HORIZON < 30 * 24 * 3600  # inside Cloud Tasks' limit
    assert json.loads(task.http_request.body)["notBefore"] == wake  # the handler re-arms


async def test_dispatch_creates_the_task_in_the_queue() -> None:
    client = RecordingClient()
    await dispatcher(client).dispatch(package(), "order-1:1")
    [(parent, task, kwargs)] = client.created
    assert parent == QUEUE
    assert task.name.endswith(task_id("order-1:1"))
    assert kwargs["retry"] is not None  # CreateTask is retried: the name makes it safe


async def test_already_exists_counts_as_success() -> None:
    client = RecordingClient()
    d = dispatcher(client)
    await d.dispatch(package(), "order-1:1")
    await d.dispatch(package(), "order-1:1")  # no error
    assert len(client.created) == 1


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (gexc.NotFound("queue gone"), ConfigurationError),
        (gexc.PermissionDenied("no enqueuer role"), ConfigurationError),
        (gexc.ServiceUnavailable("down"), CloudTasksError),
        (gexc.ResourceExhausted("quota"), CloudTasksError),
    ],
)
async def test_vendor_errors_become_loom_errors(error: Exception, expected: type) -> None:
    d = dispatcher(RecordingClient(fail_with=error))
    with pytest.raises(expected) as info:
        await d.dispatch(package(), "order-1:1")
    assert info.value.__cause__ is error
    assert info.value.details["dispatch_id"] == "order-1:1"


def test_from_url_reads_the_queue_and_the_environment() -> None:
    env = {
        "LOOM_TASKS_TARGET_URL": "https://w.example/",
        "LOOM_TASKS_SERVICE_ACCOUNT": SA,
        "LOOM_TASKS_DISPATCH_DEADLINE": "300",
    }
    d = CloudTasksDispatcher.from_url(f"cloudtasks://{QUEUE}", env)
    assert (d.queue, d.target_url, d.service_account) == (
        QUEUE,
        "https://w.example/tasks/execute",
        SA,
    )
    assert (d.audience, d.dispatch_deadline) == ("https://w.example", 300.0)


@pytest.mark.parametrize(
    ("url", "env", "match"),
    [
        ("cloudtasks://projects/p/queues/q", {"LOOM_TASKS_TARGET_URL": "http://w"}, "expected"),
        ("tasks://" + QUEUE, {"LOOM_TASKS_TARGET_URL": "http://w"}, "expected"),
        ("cloudtasks://" + QUEUE, {}, "LOOM_TASKS_TARGET_URL"),
        ("cloudtasks://" + QUEUE, {"LOOM_TASKS_TARGET_URL": "w.example"}, "http"),
        (
            "cloudtasks://" + QUEUE,
            {"LOOM_TASKS_TARGET_URL": "http://w", "LOOM_TASKS_DISPATCH_DEADLINE": "soon"},
            "seconds",
        ),
    ],
)
def test_bad_configuration_is_a_clear_error(url: str, env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        CloudTasksDispatcher.from_url(url, env)


def test_parse_queue_url() -> None:
    assert parse_queue_url(f"cloudtasks://{QUEUE}/") == QUEUE
