"""What the Firestore store's tests on the emulator share: the project and a step event."""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch

from loom.events import EffectCompleted
from loom_gcp.firestore import FirestoreEventStore

PROJECT = "loom-test"


def step(seq: int, step_id: str = "s", output: object = None) -> EffectCompleted:
    """An idempotent step's completion at ``seq`` (effect ``fx``, recorded at t=1)."""
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output=output, at=1.0)


def lose_first_ack(store: FirestoreEventStore, *, applied: bool) -> list[int]:
    """Make the store's next commit fail with UNAVAILABLE, applied or not."""
    real = store._io.commit_once  # pyright: ignore[reportPrivateUsage]
    calls: list[int] = []

    async def flaky(batch: AsyncWriteBatch, timeout: float) -> list[Any] | None:
        calls.append(1)
        if len(calls) == 1:
            if applied:
                await real(batch, timeout)
            raise gexc.ServiceUnavailable("connection reset before the response")
        return await real(batch, timeout)

    store._io.commit_once = flaky  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
    return calls
