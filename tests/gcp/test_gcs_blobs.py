"""``GcsBlobStore`` beyond the shared blob contract, on fake-gcs-server."""

from __future__ import annotations

import uuid

import pytest
from google.cloud import storage

from loom.errors import ConfigurationError
from loom_gcp.gcs import GcsBlobStore

pytestmark = pytest.mark.slow


async def test_objects_live_under_the_prefix_and_refs_are_gs_urls(gcs_emulator: str) -> None:
    client = storage.Client(project="loom-test")
    bucket = client.create_bucket(f"p-{uuid.uuid4().hex[:20]}").name
    store = GcsBlobStore.from_url(f"gs://{bucket}/loom/blobs/")
    ref = await store.put("e1/3/out", b"payload")
    assert ref == f"gs://{bucket}/loom/blobs/e1/3/out"
    assert client.bucket(bucket).blob("loom/blobs/e1/3/out").download_as_bytes() == b"payload"
    other = GcsBlobStore(bucket, "elsewhere", client=client)
    with pytest.raises(ValueError):  # a ref under another prefix is not this store's
        await other.get(ref)
    await store.aclose()


def test_from_url_needs_a_bucket(gcs_emulator: str) -> None:
    for bad in ("gs://", "s3://bucket/x", "bucket/x"):
        with pytest.raises(ConfigurationError):
            GcsBlobStore.from_url(bad)
