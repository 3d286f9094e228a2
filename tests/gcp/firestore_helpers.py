"""What the Firestore store's tests on the emulator share: the project and a step event."""

from __future__ import annotations

from loom.events import EffectCompleted

PROJECT = "loom-test"


def step(seq: int, step_id: str = "s", output: object = None) -> EffectCompleted:
    """An idempotent step's completion at ``seq`` (effect ``fx``, recorded at t=1)."""
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output=output, at=1.0)
