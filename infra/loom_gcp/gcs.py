"""``GcsBlobStore``: large payloads in a Cloud Storage bucket (``gs://bucket/prefix``).

Each key is one object, created with ``if_generation_match=0`` so it is written once. The
client retries such a conditional upload on transient errors; if the first attempt had in fact
landed, the retry fails its precondition, and the store compares the stored bytes with its own
to tell that (success) from a different write under the same key (an error).

The storage client is synchronous; calls run in worker threads.
"""

from __future__ import annotations

import asyncio

from google.api_core import exceptions as gexc
from google.cloud import storage

from loom.blobs import (
    BlobStore,
    key_from_ref,
    parse_bucket_url,
    refuse_overwrite,
    validate_key,
    validate_prefix,
)
from loom.errors import BlobNotFoundError, StoreError


class GcsBlobStore(BlobStore):
    """A :class:`~loom.blobs.BlobStore` on Cloud Storage; references are ``gs://`` URLs.

    Args:
        bucket: The bucket name (it must exist).
        prefix: Prepended to every key, e.g. ``"loom/blobs"``.
        client: A client to use (not closed by :meth:`aclose`); default: a new one.
    """

    def __init__(self, bucket: str, prefix: str = "", *, client: storage.Client | None = None):
        self._owns_client = client is None
        self._client = client or storage.Client()
        self._bucket = self._client.bucket(bucket)
        self._prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self._ref_prefix = f"gs://{bucket}/{self._prefix}"

    @classmethod
    def from_url(cls, url: str) -> GcsBlobStore:
        """Build a store from ``gs://BUCKET[/PREFIX]``."""
        return cls(*parse_bucket_url(url, "gs"))

    async def put(self, key: str, data: bytes) -> str:
        name = self._prefix + validate_key(key)
        await asyncio.to_thread(self._put, name, bytes(data), key)
        return self._ref_prefix + key

    def _put(self, name: str, data: bytes, key: str) -> None:
        blob = self._bucket.blob(name)
        try:
            blob.upload_from_string(
                data, content_type="application/octet-stream", if_generation_match=0
            )
        except gexc.PreconditionFailed:
            if self._download(name, key) != data:
                raise refuse_overwrite(key) from None
        except gexc.GoogleAPIError as exc:
            raise StoreError(f"Cloud Storage: writing {name!r} failed: {exc}") from exc

    async def get(self, ref: str) -> bytes:
        key = key_from_ref(ref, self._ref_prefix)
        return await asyncio.to_thread(self._download, self._prefix + key, ref)

    def _download(self, name: str, ref: str) -> bytes:
        try:
            data: bytes = self._bucket.blob(name).download_as_bytes()
        except gexc.NotFound:
            raise BlobNotFoundError(f"no blob {ref!r}", details={"ref": ref}) from None
        except gexc.GoogleAPIError as exc:
            raise StoreError(f"Cloud Storage: reading {name!r} failed: {exc}") from exc
        return data

    async def delete_prefix(self, prefix: str) -> int:
        name = self._prefix + validate_prefix(prefix)
        return await asyncio.to_thread(self._delete_prefix, name)

    def _delete_prefix(self, name: str) -> int:
        count = 0
        try:
            blobs: list[storage.Blob] = list(self._client.list_blobs(self._bucket, prefix=name))
            for blob in blobs:
                try:
                    blob.delete()
                except gexc.NotFound:
                    continue  # deleted meanwhile (another purge): still gone
                count += 1
        except gexc.GoogleAPIError as exc:
            raise StoreError(f"Cloud Storage: deleting under {name!r} failed: {exc}") from exc
        return count

    async def aclose(self) -> None:
        if self._owns_client:
            self._client.close()
