"""Fixtures of the Firestore store's tests: a fresh database on the emulator, a raw client
on it (to write or inspect documents directly), and store objects over it. A test module
that needs another shape defines its own fixture of the same name."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from google.cloud import firestore

from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT


@pytest.fixture
async def database(firestore_emulator: str) -> str:
    """A database id of its own (the emulator creates it on first use)."""
    return f"t{uuid.uuid4().hex[:24]}"


@pytest.fixture
async def client(database: str) -> AsyncIterator[firestore.AsyncClient]:
    """A raw client on ``database``."""
    c = firestore.AsyncClient(project=PROJECT, database=database)
    yield c
    await c._firestore_api.transport.close()  # pyright: ignore[reportPrivateUsage]


@pytest.fixture
async def stores(database: str) -> AsyncIterator[list[FirestoreEventStore]]:
    """Three store objects over one database: three processes' views."""
    made = [FirestoreEventStore(project=PROJECT, database=database) for _ in range(3)]
    yield made
    for s in made:
        await s.aclose()
