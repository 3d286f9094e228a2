"""Claim checks: JSON values over a size limit live in a blob store, events keep a reference.

A stored value is either the value itself or ``{"$blob": ref}``. Decoding is transparent for
the flow; a missing blob is a :class:`~loom.errors.BlobNotFoundError`, never a silent ``None``.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, cast

from loom.errors import ConfigurationError

if TYPE_CHECKING:
    from loom.blobs import BlobStore

DEFAULT_THRESHOLD = 256 * 1024
_REF = "$blob"


class PayloadCodec:
    """Offloads large JSON values to ``blobs`` and reads them back."""

    def __init__(self, blobs: BlobStore | None = None, threshold: int = DEFAULT_THRESHOLD):
        self.blobs = blobs
        self.threshold = threshold

    async def encode(self, value: Any, key: str) -> tuple[Any, int]:
        """Return ``(stored, size)``: the value or a blob reference, and its JSON size."""
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        size = len(data)
        if size <= self.threshold:
            return value, size
        if self.blobs is None:
            raise ConfigurationError(
                f"a payload of {size} bytes exceeds the {self.threshold}-byte limit and no "
                "blob store is configured (set LOOM_BLOBS)"
            )
        raw = data.encode()
        # Blob keys are write-once; the content hash keeps an idempotent effect that returns
        # other bytes on a re-run (after a crash) from colliding with its first output.
        ref = await self.blobs.put(f"{key}/{hashlib.sha256(raw).hexdigest()[:16]}", raw)
        return {_REF: ref}, size

    async def decode(self, stored: Any) -> Any:
        """Return the value a stored form stands for, fetching a blob if it is a reference."""
        ref = _blob_ref(stored)
        if ref is None:
            return stored
        if self.blobs is None:
            raise ConfigurationError("the log references a blob but no blob store is set")
        return json.loads(await self.blobs.get(ref))


def _blob_ref(stored: Any) -> str | None:
    if isinstance(stored, dict):
        mapping = cast(dict[str, Any], stored)
        if len(mapping) == 1 and _REF in mapping:
            return str(mapping[_REF])
    return None
