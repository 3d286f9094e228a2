"""Fixtures for the cloud path (a pytest plugin, loaded from tests/conftest.py).

* ``tasks_emulator``: ``gcloud-tasks-emulator`` (PyPI) run in this process, with what it
  lacks and the tests need added here: a duplicate task name answers ``ALREADY_EXISTS`` as
  real Cloud Tasks does, queues can deliver every task twice, the gRPC port is bound to
  loopback only, and its queue threads never keep the test process alive.
* ``pubsub_emulator``: the Pub/Sub emulator from google-cloud-cli, one JVM by PID.
* ``id_token_server``: a local OAuth token endpoint and a generated service-account key file,
  so ``google-auth`` mints ID tokens without leaving the machine.
* ``cloud_run_admin``: the in-process fake of the Cloud Run Admin API
  (``tests/gcp/fakes/cloud_run_admin.py``).

Everything listens on 127.0.0.1; ``offline_google_env`` (from ``tests.emulators``) points
metadata-server lookups at a dead loopback port.
"""

from __future__ import annotations

import os

# The emulators' gRPC servers and clients run on threads of the test process, which also
# forks to start servers (tests/procs.py runs a preexec_fn). gRPC's fork handlers then run
# in a child that has none of those threads and can abort it; without them the child just
# execs. Set before gRPC initializes.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests import procs
from tests.emulators import _sdk_root, _unavailable

PROJECT = "loom-test"
LOCATION = "local"


# -- Cloud Tasks --------------------------------------------------------------------------


def _tasks_emulator_module() -> Any:
    try:
        import gcloud_tasks_emulator.server as server
    except ImportError:
        _unavailable(
            "gcloud-tasks-emulator is not installed "
            "(pip install --no-deps gcloud-tasks-emulator==0.6.2)"
        )
        raise AssertionError("unreachable") from None
    return server


def _strict_state_class(server: Any) -> type:
    """``QueueState`` with real Cloud Tasks' name rule, and optional double delivery."""
    from google.api_core.exceptions import AlreadyExists

    class StrictQueueState(server.QueueState):  # type: ignore[misc, name-defined]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.names: set[str] = set()
            self.duplicating: set[str] = set()
            self.duplicated: set[str] = set()
            self.deliveries: list[tuple[str, int]] = []  # (task name, HTTP status)
            self._names_lock = threading.Lock()

        def create_task(self, queue: str, task: Any) -> Any:
            with self._names_lock:
                if task.name and task.name in self.names:
                    raise AlreadyExists(f"Requested entity already exists: {task.name}")
                created = super().create_task(queue, task)
                self.names.add(created.name)
                return created

        def submit_task(self, task_name: str, force_run: bool = False) -> Any:
            queue = task_name.rsplit("/", 2)[0]
            before = next(
                (t.dispatch_count for t in self._queue_tasks.get(queue, []) if t.name == task_name),
                None,
            )
            task = super().submit_task(task_name, force_run)
            if task.dispatch_count == before:
                return task  # not due yet: it went back to the end of the queue
            status = task.last_attempt.response_status.code
            self.deliveries.append((task_name, status))
            if (
                200 <= status < 300
                and queue in self.duplicating
                and task_name not in self.duplicated
            ):
                # Deliver it again later, after whatever is queued now (at-least-once).
                self.duplicated.add(task_name)
                self._queue_tasks[queue].append(task)
            return task

    return StrictQueueState


def _loopback_api_class(server: Any) -> type:
    from concurrent import futures

    import grpc

    class LoopbackAPIThread(server.APIThread):  # type: ignore[misc, name-defined]
        def run(self) -> None:
            self._httpd = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
            server.add_CloudTasksServicer_to_server(server.Greeter(self._state), self._httpd)
            self._httpd.add_insecure_port(f"{procs.LOOPBACK}:{self._port}")
            self._httpd.start()

    return LoopbackAPIThread


def _daemon_processor_class(server: Any) -> type:
    class DaemonProcessor(server.Processor):  # type: ignore[misc, name-defined]
        def process_queue(self, queue_name: str) -> None:
            if queue_name not in self._known_queues:
                self._known_queues.add(queue_name)
                thread = threading.Thread(
                    target=self._process_queue, args=[queue_name], daemon=True
                )
                self._queue_threads[queue_name] = thread
                thread.start()

    DaemonProcessor.daemon = True
    return DaemonProcessor


@dataclass
class TasksEmulator:
    """A running Cloud Tasks emulator.

    Attributes:
        host: ``127.0.0.1:PORT`` of its gRPC API (``CLOUD_TASKS_EMULATOR_HOST``).
        state: Its queue state (tasks, names, deliveries), for assertions.
    """

    host: str
    state: Any
    _queues: list[str] = field(default_factory=list[str])

    def client(self) -> Any:
        """A ``CloudTasksClient`` on the emulator."""
        from loom_gcp.cloud_tasks import emulator_client

        return emulator_client(self.host)

    def new_queue(self, *, duplicate: bool = False) -> str:
        """Create a queue with a unique name (the emulator never reuses a deleted one).

        Args:
            duplicate: Deliver every task that succeeded a second time, later.
        """
        from google.cloud import tasks_v2

        name = f"projects/{PROJECT}/locations/{LOCATION}/queues/q-{uuid.uuid4().hex[:12]}"
        parent = name.rsplit("/queues/", 1)[0]
        self.client().create_queue(parent=parent, queue=tasks_v2.Queue(name=name))
        if duplicate:
            self.state.duplicating.add(name)
        self._queues.append(name)
        return name

    def pending(self, queue: str) -> list[Any]:
        """Tasks still in ``queue`` (due or not)."""
        return list(self.state._queue_tasks.get(queue, []))

    def deliveries(self, queue: str) -> list[tuple[str, int]]:
        """``(task name, status)`` of every HTTP delivery made from ``queue``."""
        return [d for d in self.state.deliveries if d[0].startswith(f"{queue}/")]

    def drop_queues(self) -> None:
        """Delete the queues made so far (their threads stop)."""
        for name in self._queues:
            self.state.delete_queue(name)
        self._queues.clear()


@pytest.fixture(scope="session")
def _tasks_emulator_session(offline_google_env: None) -> Iterator[TasksEmulator]:
    server = _tasks_emulator_module()
    port = procs.free_port()
    state = _strict_state_class(server)(procs.LOOPBACK, 9, -1)
    api = _loopback_api_class(server)(state, procs.LOOPBACK, port)
    processor = _daemon_processor_class(server)(state)
    api.start()
    processor.start()
    # run() returns once the gRPC server is serving (APIThread.join would stop it).
    threading.Thread.join(api, timeout=5)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLOUD_TASKS_EMULATOR_HOST", f"{procs.LOOPBACK}:{port}")
        try:
            yield TasksEmulator(f"{procs.LOOPBACK}:{port}", state)
        finally:
            processor.join(timeout=1)
            if api._httpd is not None:
                api._httpd.stop(grace=0)


@pytest.fixture
def tasks_emulator(_tasks_emulator_session: TasksEmulator) -> Iterator[TasksEmulator]:
    """The session's Cloud Tasks emulator; queues made by the test are deleted after it."""
    yield _tasks_emulator_session
    _tasks_emulator_session.drop_queues()


# -- Pub/Sub ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pubsub_emulator(
    offline_google_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Start the Pub/Sub emulator; yield its ``host:port`` (also ``PUBSUB_EMULATOR_HOST``)."""
    script = _sdk_root() / "platform/pubsub-emulator/bin/cloud-pubsub-emulator"
    if not script.is_file():
        _unavailable(f"Pub/Sub emulator missing: {script}")
    port = procs.free_port()
    # The script execs java, so the PID we hold is the JVM's.
    argv = [str(script), f"--host={procs.LOOPBACK}", f"--port={port}"]
    log = tmp_path_factory.mktemp("pubsub") / "emulator.log"
    with (
        procs.running("pubsub-emulator", argv, port=port, log_path=log) as server,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv("PUBSUB_EMULATOR_HOST", server.host)
        yield server.host


# -- ID tokens ----------------------------------------------------------------------------


@dataclass
class IdTokenServer:
    """A local token endpoint for ``google-auth`` service-account ID tokens.

    Attributes:
        url: The token endpoint (the key file's ``token_uri``).
        key_file: A generated service-account key file whose ``token_uri`` is ``url``.
        email: The service account's email.
        issued: The claims of every ID token issued so far.
        lifetime: Seconds each token is valid.
    """

    url: str
    key_file: Path
    email: str
    issued: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    lifetime: float = 3600.0


@functools.cache
def _private_key_pem() -> str:
    """One RSA key per session: generating one takes a noticeable fraction of a second."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _service_account_key(path: Path, email: str, token_uri: str) -> Any:
    from google.auth import crypt

    pem = _private_key_pem()
    info = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "local-key",
        "private_key": pem,
        "client_email": email,
        "client_id": "1",
        "token_uri": token_uri,
    }
    path.write_text(json.dumps(info))
    return crypt.RSASigner.from_string(pem, "local-key")


def _token_handler(endpoint: IdTokenServer, signer: Any) -> type[BaseHTTPRequestHandler]:
    from google.auth import jwt

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            assertion = jwt.decode(form["assertion"][0], verify=False)
            now = int(time.time())
            claims = {
                "iss": "https://accounts.google.com",
                "aud": assertion["target_audience"],
                "email": assertion["iss"],
                "sub": "1",
                "iat": now,
                "exp": now + int(endpoint.lifetime),
            }
            endpoint.issued.append(claims)
            token = jwt.encode(signer, claims).decode()
            body = json.dumps({"id_token": token}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


@pytest.fixture
def id_token_server(
    offline_google_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[IdTokenServer]:
    """A token endpoint and a key file; ``GOOGLE_APPLICATION_CREDENTIALS`` points at it."""
    port = procs.free_port()
    endpoint = IdTokenServer(
        url=f"http://{procs.LOOPBACK}:{port}/token",
        key_file=tmp_path / "service-account.json",
        email=f"loom-worker@{PROJECT}.iam.gserviceaccount.com",
    )
    signer = _service_account_key(endpoint.key_file, endpoint.email, endpoint.url)
    httpd = ThreadingHTTPServer((procs.LOOPBACK, port), _token_handler(endpoint, signer))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(endpoint.key_file))
    try:
        yield endpoint
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- Cloud Run Admin API ------------------------------------------------------------------


@pytest.fixture
def cloud_run_admin(offline_google_env: None) -> Iterator[Any]:
    """The fake Cloud Run Admin API on a loopback port (see its module docstring)."""
    from tests.gcp.fakes.cloud_run_admin import FakeCloudRunAdmin

    fake = FakeCloudRunAdmin()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
