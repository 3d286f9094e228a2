"""Patches: ``ctx.patched(change_id)`` and ``ctx.deprecate_patch(change_id)``.

Changing a flow's code under executions that are already running is safe when the change
is wrapped in a patch::

    if ctx.patched("send-receipt"):
        await ctx.execute("mail.receipt", order)   # the new code
    else:
        ...                                       # what the old code did here

The rules (those of Temporal's ``workflow.patched``, adapted to positional step ids):

* The log holds a ``PatchRecorded`` marker for the change → ``True``.
* No marker, and the execution's history already records an operation at the position the
  flow stands at (the next step id of the calling task), or the execution has finished →
  the history predates the change: ``False``, and nothing is recorded.
* No marker, and nothing is recorded at that position (the flow is at the end of its
  history, running new code live) → a marker is recorded with the next append: ``True``.

The first answer for a change id holds for the rest of the execution (later calls with the
same id return it too). A marker takes no step id, so calling ``patched`` never shifts the
step ids of the steps after it: an old history replays through the ``else`` branch with the
step ids it was recorded with.

``deprecate_patch(change_id)`` is the cleanup phase, once no execution that took the old
branch is still running: the ``else`` branch is deleted and ``patched`` replaced by
``deprecate_patch``, which never branches and never diverges. It records the marker when the
flow is at the end of its history (so code still holding ``patched`` for the same id, e.g. a
rollback, takes the new branch), and accepts histories with or without it. After that, the
call itself can be deleted: a marker nothing asks about is ignored.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from loom import events as ev
from loom.errors import ConfigurationError, ContextMisuseError
from loom.kernel.context import SCOPE, FlowContext, owned
from loom.kernel.fold import ExecutionState
from loom.kernel.primitive import Primitive

if TYPE_CHECKING:
    from loom.kernel.session import Session

__all__ = ["deprecate_patch", "patched"]


class _Patches:
    """What one session knows about patches: answers given and positions recorded."""

    __slots__ = ("answers", "recorded")

    def __init__(self, state: ExecutionState) -> None:
        self.answers: dict[str, bool] = {}
        self.recorded = _recorded_positions(state)


_SESSIONS: weakref.WeakKeyDictionary[Session, _Patches] = weakref.WeakKeyDictionary()


def _recorded_positions(state: ExecutionState) -> frozenset[str]:
    """Every step id the history records, with every prefix (``"3.1.2"`` → ``3``, ``3.1``).

    A task created by a flow consumes its parent's next id as a prefix without recording
    anything under the bare id, so a position counts as recorded when anything under it is.
    """
    positions: set[str] = set()
    for step_id in (*state.steps, *state.decisions, *state.gates):
        parts = step_id.split(".")
        positions.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return frozenset(positions)


def _of(session: Session) -> _Patches:
    known = _SESSIONS.get(session)
    if known is None:
        # Computed once, from the history the session loaded: the positions recorded later
        # by this session are behind the flow, never at its next position.
        known = _SESSIONS[session] = _Patches(session.state)
    return known


def _position(session: Session) -> str:
    """The step id the calling task's next operation will take (not consumed)."""
    scope = SCOPE.get()
    if scope is None or scope.session is not session:
        raise ContextMisuseError("ctx.patched must be called inside the flow that owns ctx")
    return f"{scope.prefix}{scope.n + 1}"


def _check_id(change_id: str) -> None:
    if not isinstance(change_id, str) or not change_id:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigurationError(f"a patch needs a non-empty change id, got {change_id!r}")


def _at_frontier(session: Session, known: _Patches, position: str) -> bool:
    """Whether the flow runs past the end of its recorded history here."""
    return not session.state.finished and position not in known.recorded


def _record(session: Session, change_id: str, position: str, deprecated: bool) -> None:
    marker = ev.PatchRecorded(change_id=change_id, step_id=position, deprecated=deprecated)
    session.journal.pending.append(marker)  # written with the next append, like decisions
    _patch_recorded(session.state, marker)


def patched(session: Session, change_id: str) -> bool:
    """The session side of ``ctx.patched``: see the module docstring."""
    _check_id(change_id)
    if session.signal is not None:
        raise session.signal
    known = _of(session)
    answer = known.answers.get(change_id)
    if answer is None:
        position = _position(session)
        answer = change_id in session.state.patches or _at_frontier(session, known, position)
        if answer and change_id not in session.state.patches:
            _record(session, change_id, position, deprecated=False)
        known.answers[change_id] = answer
    return answer


def deprecate_patch(session: Session, change_id: str) -> None:
    """The session side of ``ctx.deprecate_patch``: see the module docstring."""
    _check_id(change_id)
    if session.signal is not None:
        raise session.signal
    known = _of(session)
    if change_id in session.state.patches or change_id in known.answers:
        return
    position = _position(session)
    if _at_frontier(session, known, position):
        _record(session, change_id, position, deprecated=True)
    known.answers[change_id] = True


def _patch_recorded(s: ExecutionState, e: ev.PatchRecorded) -> None:
    if e.change_id not in s.patches:
        s.patches.append(e.change_id)


class PatchesContext(FlowContext):
    """The ``ctx`` methods of patches."""

    __slots__ = ()

    def patched(self, change_id: str) -> bool:
        """True where this execution runs the change ``change_id``, False where its history
        predates it; takes no step id (see :mod:`loom.primitives.patches`)."""
        owned(self)
        return patched(self._session, change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """The cleanup phase of ``patched(change_id)``: never branches (see :mod:`loom.primitives.patches`)."""
        owned(self)
        deprecate_patch(self._session, change_id)


PRIMITIVE = Primitive("patches", head={"PatchRecorded": _patch_recorded}, context=PatchesContext)
