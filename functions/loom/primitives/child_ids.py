"""A child flow's derived execution id (:mod:`loom.primitives.children`).

Its own module, so that the modules that start, name and check children share it without
import cycles. The form is reserved for the engine with the others it derives
(:mod:`loom.reserved_ids`).
"""

from __future__ import annotations

import hashlib

from loom.ids import MAX_ID_BYTES

__all__ = ["child_id"]


def child_id(parent_id: str, step_id: str, run: int = 1) -> str:
    """The id of the child started at ``step_id`` of ``parent_id``: ``{parent}.child.{step}``,
    ``{parent}#run{n}.child.{step}`` in run ``n`` > 1 of a parent that continued as new (its
    step ids start again); a digest of the parent's id stands in when the id would break
    the id length rule."""
    parent = parent_id if run == 1 else f"{parent_id}#run{run}"
    plain = f"{parent}.child.{step_id}"
    if len(plain.encode()) <= MAX_ID_BYTES:
        return plain
    digest = hashlib.sha256(parent.encode()).hexdigest()[:40]
    return f"{digest}.child.{step_id}"
