"""Blob stores: where payloads over the size limit go, so events keep only a reference.

The contract (``tests/contracts/test_blob_store.py`` runs unchanged over every backend):

* ``put(key, data)`` stores ``data`` under ``key`` and returns a reference string that
  ``get`` accepts. A key is written once: putting the same bytes again returns the same
  reference (so a retried write is harmless); other bytes under a used key raise
  :class:`~loom.errors.StoreError` and leave the stored bytes as they were.
* ``get(ref)`` returns the bytes, or raises :class:`~loom.errors.BlobNotFoundError`; it never
  returns None. A reference this store could not have issued raises ``ValueError``.
* ``key_of(ref)`` is the key a reference names (``ValueError`` for one this store could not
  have issued), so a caller can check whose blob a reference names before reading it.
* ``delete_prefix(prefix)`` deletes every blob whose key starts with ``prefix``, which must
  be whole segments ending in ``/`` (``"e1/"`` covers ``e1/input/…`` but never ``e10/…``);
  it returns how many it deleted and is idempotent (a second call deletes nothing).
* Keys are ``/``-separated segments; no segment may be empty or start with ``.`` (which
  rules out ``.``, ``..`` and the local store's temporary files). See :func:`validate_key`.

Backends are chosen by URL with :func:`open_blob_store`: ``memory://``, ``file:///path``
(or ``file:relative/path``), and any scheme registered in the ``loom.blobs`` entry-point
group (``gs://`` and ``s3://`` from ``loom_gcp``).
"""

from __future__ import annotations

import abc
import asyncio
import os
import shutil
import tempfile
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from loom.errors import BlobNotFoundError, ConfigurationError, StoreError
from loom.extras import requires_extra
from loom.scope import off_scope_methods

MAX_KEY_BYTES = 1024


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid blob key, else raise ``ValueError``."""
    if not key or len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"blob key must be 1-{MAX_KEY_BYTES} bytes: {key!r}")
    if "\\" in key or any(ord(ch) < 32 or ord(ch) == 127 for ch in key):
        raise ValueError(f"blob key has a backslash or control character: {key!r}")
    for segment in key.split("/"):
        if not segment or segment.startswith("."):
            raise ValueError(f"blob key segments must be non-empty, not start with '.': {key!r}")
    return key


class BlobStore(abc.ABC):
    """Write-once storage for large payloads (the claim check). See the module docstring."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        off_scope_methods(cls)  # a backend's calls take no flow step ids (loom.scope)

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> str:
        """Store ``data`` under ``key`` (once); return its reference.

        Raises:
            StoreError: The key already holds other bytes, or the backend failed.
            ValueError: The key is not valid.
        """

    @abc.abstractmethod
    async def get(self, ref: str) -> bytes:
        """The bytes a reference from :meth:`put` names.

        Raises:
            BlobNotFoundError: Nothing is stored there.
            ValueError: Not a reference of this store.
        """

    @abc.abstractmethod
    def key_of(self, ref: str) -> str:
        """The key a reference from :meth:`put` names, validated (no I/O).

        Raises:
            ValueError: Not a reference of this store, or not a valid key.
        """

    @abc.abstractmethod
    async def delete_prefix(self, prefix: str) -> int:
        """Delete every blob under ``prefix`` (segments ending in ``/``); return the count.

        Raises:
            StoreError: The backend failed (some blobs may be gone; calling again is safe).
            ValueError: The prefix is not whole segments ending in ``/``.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections. Default: nothing to release."""


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is whole key segments ending in ``/``, else raise ``ValueError``."""
    if not prefix.endswith("/"):
        raise ValueError(f"blob prefix must end with '/': {prefix!r}")
    validate_key(prefix[:-1])
    return prefix


def key_from_ref(ref: str, prefix: str) -> str:
    """The key inside a reference ``prefix + key``, validated; ``ValueError`` if foreign."""
    if not ref.startswith(prefix):
        raise ValueError(f"not a reference of this blob store ({prefix}…): {ref!r}")
    return validate_key(ref[len(prefix) :])


def refuse_overwrite(key: str) -> StoreError:
    """The error for a second, different write to a key."""
    return StoreError(f"blob {key!r} already holds other data (keys are written once)")


class InMemoryBlobStore(BlobStore):
    """Blobs in a dict (``memory://``), for tests; references look like ``memory:KEY``."""

    def __init__(self) -> None:
        self._blobs: dict[str, bytes] = {}

    async def put(self, key: str, data: bytes) -> str:
        validate_key(key)
        stored = self._blobs.setdefault(key, bytes(data))
        if stored != data:
            raise refuse_overwrite(key)
        return f"memory:{key}"

    def key_of(self, ref: str) -> str:
        return key_from_ref(ref, "memory:")

    async def get(self, ref: str) -> bytes:
        key = self.key_of(ref)
        try:
            return self._blobs[key]
        except KeyError:
            raise BlobNotFoundError(f"no blob {ref!r}", details={"ref": ref}) from None

    async def delete_prefix(self, prefix: str) -> int:
        doomed = [k for k in self._blobs if k.startswith(validate_prefix(prefix))]
        for key in doomed:
            del self._blobs[key]
        return len(doomed)


class LocalBlobStore(BlobStore):
    """Blobs as files under a root directory: the embedded default.

    References are relative (``file:KEY``), so logs record no machine path and the directory
    can be moved or restored elsewhere. Key segments become directories, so a key cannot also
    be a directory of another key (``a/b`` and ``a/b/c``): that write raises ``StoreError``. A blob is written to a temporary file, flushed to disk,
    then hard-linked into place: the link appears whole or not at all, and (unlike a rename)
    it never replaces a file that is already there.

    Args:
        root: The directory; created if missing.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    async def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        try:
            await asyncio.to_thread(self._write_once, path, bytes(data), key)
        except (NotADirectoryError, IsADirectoryError, FileExistsError) as exc:
            raise StoreError(f"blob {key!r} clashes with another key's directory") from exc
        except OSError as exc:
            raise StoreError(f"writing blob {key!r} failed: {exc}") from exc
        return f"file:{key}"

    def _write_once(self, path: Path, data: bytes, key: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                if path.read_bytes() != data:
                    raise refuse_overwrite(key) from None
                return
            _fsync_dir(path.parent)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def key_of(self, ref: str) -> str:
        return key_from_ref(ref, "file:")

    async def get(self, ref: str) -> bytes:
        path = self._path(self.key_of(ref))
        try:
            return await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise BlobNotFoundError(f"no blob {ref!r}", details={"ref": ref}) from None
        except OSError as exc:
            raise StoreError(f"reading blob {ref!r} failed: {exc}") from exc

    async def delete_prefix(self, prefix: str) -> int:
        directory = self.root.joinpath(*validate_prefix(prefix)[:-1].split("/"))
        try:
            return await asyncio.to_thread(_remove_tree, directory)
        except OSError as exc:
            raise StoreError(f"deleting blobs under {prefix!r} failed: {exc}") from exc


def _remove_tree(directory: Path) -> int:
    """Delete a directory of blobs; the number of blob files it held (0 if it is absent)."""
    if not directory.is_dir():
        return 0
    count = sum(1 for f in directory.rglob("*") if f.is_file() and not f.name.startswith("."))
    shutil.rmtree(directory, ignore_errors=False)
    _fsync_dir(directory.parent)
    return count


def _fsync_dir(directory: Path) -> None:
    """Make a new directory entry durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_blob_store(url: str) -> BlobStore:
    """The blob store a URL names: ``memory://``, ``file:///path``, or an entry point.

    Raises:
        ConfigurationError: Malformed URL or unknown scheme.
    """
    parts = urlparse(url)
    if parts.scheme == "memory":
        return InMemoryBlobStore()
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ConfigurationError(f"expected file:///path or file:relative/path, got {url!r}")
        return LocalBlobStore(unquote(parts.path))
    for entry in entry_points(group="loom.blobs"):
        if entry.name == parts.scheme:
            with requires_extra(f"{parts.scheme}://"):
                store = entry.load()(url)
            if not isinstance(store, BlobStore):
                raise ConfigurationError(f"entry point {entry.value} did not build a BlobStore")
            return store
    raise ConfigurationError(f"no blob store for {url!r} (known: memory://, file://, entry points)")


def parse_bucket_url(url: str, scheme: str) -> tuple[str, str]:
    """``SCHEME://BUCKET[/PREFIX]`` → ``(bucket, prefix)``, for object-store backends."""
    parts = urlparse(url)
    if parts.scheme != scheme or not parts.netloc:
        raise ConfigurationError(f"expected {scheme}://BUCKET[/PREFIX], got {url!r}")
    return parts.netloc, parts.path
