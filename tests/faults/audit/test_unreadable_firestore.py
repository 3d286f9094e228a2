"""An event this release cannot read, in a Firestore page document, on the emulator.

Fault: a newer release appended an event of a type this one does not know (a rolling
deploy), or a page document was damaged. The page is rewritten through a raw client, as
the newer release or the damage would leave it; then a store object of this release, as
another worker would, loads the log.

Promise checked: the load fails with a ``StoreError`` (``code="unreadable_event"``, HTTP
503 at a route) naming the execution and the event's seq, never a bare validation error;
a read of the tail after it fails the same way.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from google.cloud import firestore

from loom.errors import StoreError
from loom.events import EffectCompleted, ExecutionStarted
from loom.store import AppendRequest, StatusChange
from loom_gcp.firestore import FirestoreEventStore

pytestmark = pytest.mark.slow
PROJECT = "loom-test"


def _step(seq: int) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=str(seq), effect="fx", output=seq, at=1.0)


@pytest.mark.parametrize("damage", ["newer", "garbage"])
async def test_an_unreadable_page_body_is_a_store_error_naming_its_seq(
    firestore_emulator: str, damage: str
) -> None:
    database = f"a{uuid.uuid4().hex[:24]}"
    store = FirestoreEventStore(project=PROJECT, database=database)
    client = firestore.AsyncClient(project=PROJECT, database=database)
    try:
        await store.create(ExecutionStarted(execution_id="e1", flow="f", input=None))
        events = [_step(2), _step(3), _step(4)]
        await store.append(AppendRequest("e1", 1, list(events), StatusChange("running")))
        pages: Any = client.collection("executions").document("e1").collection("events")
        [page] = [doc async for doc in pages.stream()]
        bodies = list(page.to_dict()["bodies"])
        assert len(bodies) == 3
        if damage == "newer":
            bodies[1] = json.dumps({"type": "StepHibernated", "schema_version": 9, "seq": 3})
        else:
            bodies[1] = bodies[1][:20]
        await page.reference.update({"bodies": bodies})

        other = FirestoreEventStore(project=PROJECT, database=database)  # another worker
        try:
            with pytest.raises(StoreError) as err:
                await other.load("e1")
            assert err.value.code == "unreadable_event"
            assert err.value.details == {"execution_id": "e1", "seq": 3}
            assert "event 3 of execution 'e1'" in err.value.message
            cause = "'StepHibernated'" if damage == "newer" else "Invalid JSON"
            assert cause in err.value.message
            with pytest.raises(StoreError):
                await other.read("e1", after_seq=1)
        finally:
            await other.aclose()
    finally:
        await store.aclose()
        await client._firestore_api.transport.close()  # pyright: ignore[reportPrivateUsage]
