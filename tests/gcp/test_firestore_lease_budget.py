"""A Firestore lease change that cannot finish within its budget is a retryable
``StoreUnavailableError`` (503 to a caller), never a bare ``TimeoutError`` (a 500).

The real emulator; the only thing forced is the wait: another change on the same queue in
this process holds the holder's lock past a budget shortened for the test.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from google.cloud import firestore

import loom_gcp.firestore_leases as firestore_leases
from loom.errors import StoreUnavailableError
from loom.store.leases import LeaseRequest
from loom_gcp.firestore_leases import FirestoreLeaseSet

pytestmark = pytest.mark.slow


async def test_a_change_waiting_past_its_budget_is_store_unavailable(
    client: firestore.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = FirestoreLeaseSet(client)
    request = LeaseRequest("q", "e1", now=time.time(), ttl=60, limit=1, owner="claim-1")
    assert await leases.acquire(request)  # the backend works when not held up
    monkeypatch.setattr(firestore_leases, "BUDGET", 0.3)
    # A release takes turns with the other changes of its holder's document.
    async with leases._lock("q/h/e1"):  # pyright: ignore[reportPrivateUsage]
        with pytest.raises(StoreUnavailableError, match="retry later") as caught:
            await asyncio.wait_for(leases.release("q", "e1", "claim-1"), timeout=10)
    assert isinstance(caught.value.__cause__, TimeoutError)
    depth = await leases.depth("q", time.time())
    assert depth.in_flight == 1  # the change that gave up changed nothing
