"""The form of a child flow's execution id, reserved for the engine (:mod:`loom.primitives.children`).

Its own module, importing nothing of the engine's, so that every entry point that starts an
execution (``Runtime.start``, ``loom.ops.fork``) can refuse the form without import cycles.
"""

from __future__ import annotations

import re

from loom.errors import ReservedExecutionIdError

__all__ = ["check_outside_id"]

# Every id :func:`loom.primitives.children.child_id` makes, and nothing a step id could not end: ``.child.`` then
# numbers joined by dots (a task's steps are ``3.1``, ``3.2``…).
_CHILD_FORM = re.compile(r".+\.child\.[0-9]+(?:\.[0-9]+)*", re.DOTALL)


def check_outside_id(execution_id: str) -> str:
    """Return ``execution_id`` unless it has the form of a child flow's id.

    Raises:
        ReservedExecutionIdError: It does; only a parent's child start may create it.
    """
    if ".child." in execution_id and _CHILD_FORM.fullmatch(execution_id):
        raise ReservedExecutionIdError(
            f"execution id {execution_id!r} has the form the engine gives child flows "
            "('{parent}.child.{step}'); only the parent's child start may use it",
            details={"execution_id": execution_id},
        )
    return execution_id
