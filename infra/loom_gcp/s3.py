"""``S3BlobStore``: large payloads in an S3-compatible bucket (``s3://bucket/prefix``).

For deployments that keep blobs outside Google Cloud, or on an S3-compatible server. Writes
use ``If-None-Match: *`` so a key is written once; a refused retry whose stored bytes equal
ours counts as success, as in :mod:`loom_gcp.gcs`. The endpoint comes from boto3's usual
configuration (``AWS_ENDPOINT_URL``, profiles) or the ``endpoint_url`` argument.

boto3 is synchronous; calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from loom.blobs import (
    BlobStore,
    key_from_ref,
    parse_bucket_url,
    refuse_overwrite,
    validate_key,
    validate_prefix,
)
from loom.errors import BlobNotFoundError, StoreError

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_ATTEMPTS = 5


def _code(exc: ClientError) -> str:
    response = cast(dict[str, Any], exc.response)
    error: dict[str, Any] = response.get("Error") or {}
    return str(error.get("Code", ""))


class S3BlobStore(BlobStore):
    """A :class:`~loom.blobs.BlobStore` on S3; references are ``s3://`` URLs.

    Args:
        bucket: The bucket name (it must exist).
        prefix: Prepended to every key.
        endpoint_url: An S3-compatible endpoint; default from boto3's configuration.
        client: A boto3 S3 client to use instead of a new one.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        client: Any = None,
    ) -> None:
        self._s3: Any = client or boto3.client("s3", endpoint_url=endpoint_url)  # pyright: ignore[reportUnknownMemberType]
        self._bucket = bucket
        self._prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self._ref_prefix = f"s3://{bucket}/{self._prefix}"

    @classmethod
    def from_url(cls, url: str) -> S3BlobStore:
        """Build a store from ``s3://BUCKET[/PREFIX]``."""
        return cls(*parse_bucket_url(url, "s3"))

    async def put(self, key: str, data: bytes) -> str:
        name = self._prefix + validate_key(key)
        await asyncio.to_thread(self._put, name, bytes(data), key)
        return self._ref_prefix + key

    def _put(self, name: str, data: bytes, key: str) -> None:
        for attempt in range(_ATTEMPTS):
            try:
                self._s3.put_object(Bucket=self._bucket, Key=name, Body=data, IfNoneMatch="*")
                return
            except ClientError as exc:
                code = _code(exc)
                if code == "PreconditionFailed":
                    if self._download(name, key) != data:
                        raise refuse_overwrite(key) from None
                    return
                if code != "ConditionalRequestConflict" or attempt == _ATTEMPTS - 1:
                    raise StoreError(f"S3: writing {name!r} failed: {exc}") from exc
            except BotoCoreError as exc:
                raise StoreError(f"S3: writing {name!r} failed: {exc}") from exc
            # Another conditional write to this key is in flight: wait for its outcome.
            time.sleep(0.05 * 2**attempt)

    async def get(self, ref: str) -> bytes:
        key = key_from_ref(ref, self._ref_prefix)
        return await asyncio.to_thread(self._download, self._prefix + key, ref)

    async def delete_prefix(self, prefix: str) -> int:
        name = self._prefix + validate_prefix(prefix)
        return await asyncio.to_thread(self._delete_prefix, name)

    def _delete_prefix(self, name: str) -> int:
        count = 0
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=name
            )
            for page in pages:
                keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if keys:  # a page holds at most 1,000 keys: one DeleteObjects call
                    self._s3.delete_objects(Bucket=self._bucket, Delete={"Objects": keys})
                    count += len(keys)
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"S3: deleting under {name!r} failed: {exc}") from exc
        return count

    def _download(self, name: str, ref: str) -> bytes:
        try:
            response = self._s3.get_object(Bucket=self._bucket, Key=name)
            data: bytes = response["Body"].read()
        except ClientError as exc:
            if _code(exc) in _MISSING:
                raise BlobNotFoundError(f"no blob {ref!r}", details={"ref": ref}) from None
            raise StoreError(f"S3: reading {name!r} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"S3: reading {name!r} failed: {exc}") from exc
        return data
