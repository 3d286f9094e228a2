"""The embedded blob stores beyond the shared contract, and ``open_blob_store``."""

from __future__ import annotations

import shutil
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import loom.blobs
from loom.blobs import InMemoryBlobStore, LocalBlobStore, open_blob_store
from loom.errors import ConfigurationError, StoreError


async def test_local_refs_are_relative_so_the_directory_can_move(tmp_path: Path) -> None:
    ref = await LocalBlobStore(tmp_path / "a").put("e1/2/out", b"payload")
    assert ref == "file:e1/2/out" and str(tmp_path) not in ref
    shutil.move(tmp_path / "a", tmp_path / "b")
    assert await LocalBlobStore(tmp_path / "b").get(ref) == b"payload"


async def test_local_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("e1/out", b"one")
    await store.put("e1/out", b"one")
    with pytest.raises(StoreError):
        await store.put("e1/out", b"two")
    assert sorted(p.name for p in (tmp_path / "e1").iterdir()) == ["out"]


async def test_local_refs_cannot_escape_the_root(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"s")
    store = LocalBlobStore(tmp_path / "root")
    for ref in ("file:../secret", "file:/etc/hostname", "file:a/../../secret"):
        with pytest.raises(ValueError):
            await store.get(ref)


async def test_local_key_that_is_another_keys_directory_is_a_store_error(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put("a/b", b"file")
    with pytest.raises(StoreError):
        await store.put("a/b/c", b"below a file")
    assert await store.get("file:a/b") == b"file"


def test_open_blob_store_builtin_schemes(tmp_path: Path) -> None:
    assert isinstance(open_blob_store("memory://"), InMemoryBlobStore)
    local = open_blob_store(f"file://{tmp_path}/blobs")
    assert isinstance(local, LocalBlobStore) and local.root == tmp_path / "blobs"
    relative = open_blob_store("file:data/blobs")
    assert isinstance(relative, LocalBlobStore) and relative.root == Path("data/blobs")
    for bad in ("file://otherhost/x", "file:", "nope://x"):
        with pytest.raises(ConfigurationError):
            open_blob_store(bad)


def test_open_blob_store_uses_the_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        assert group == "loom.blobs"
        return [EntryPoint("fake", "tests.core.test_blob_stores:build_fake", group)]

    monkeypatch.setattr(loom.blobs, "entry_points", fake_entry_points)
    monkeypatch.setattr(
        "tests.core.test_blob_stores.build_fake",
        lambda url: built.append(url) or InMemoryBlobStore(),
    )
    assert isinstance(open_blob_store("fake://bucket/x"), InMemoryBlobStore)
    assert built == ["fake://bucket/x"]


def build_fake(url: str) -> InMemoryBlobStore:
    """Replaced in the test above; here so the entry point resolves."""
    raise AssertionError(url)
