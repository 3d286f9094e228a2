"""The form of a child flow's execution id, reserved for the engine (:mod:`loom.children`).

Kept for the modules that import :func:`check_outside_id` from here: the rule for every id
form the engine derives (children, runs, schedule ticks, re-drives, Pub/Sub starts, signed
requests' defaults) lives in :mod:`loom.reserved_ids`.
"""

from __future__ import annotations

from loom.reserved_ids import check_outside_id

__all__ = ["check_outside_id"]
