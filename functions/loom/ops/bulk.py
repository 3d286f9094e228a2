"""Bulk operations: cancel, resume or retry every execution a filter selects.

``bulk(runtime, "cancel", Selection(flow="order", status="suspended"), by="ops")`` (``loom
bulk cancel --flow order --status suspended``, ``POST /bulk/cancel``) selects executions
(:mod:`loom.ops.bulk_select`: a flow, a status, a time range of creation, ids, a limit),
asks ``authorize`` about every one of them before it acts on any (one refusal: nothing is
done), and then makes, for each in turn, the control call an operator would make for it
alone, as the principal ``by`` (the grant policy's and every record's authority), with
``note`` (free text, an operator's name) recorded beside it (:func:`loom.grants.recorded_by`):

* ``cancel``: :meth:`Runtime.cancel <loom.runtime.Runtime.cancel>` with ``reason`` (the flow
  cleans up); one that ended meanwhile is reported as such (action ``none``);
* ``resume``: :meth:`Runtime.resume <loom.runtime.Runtime.resume>` of its open gate on
  ``on`` with ``payload``, the correlation key being ``correlation_key`` (``{execution_id}``
  in it stands for each execution's id) or else the key of its one open gate on ``on``. An
  execution with no such gate open (or several, and no key) is skipped, saying why; Loom's
  own gates (``loom.*``: timers, mailboxes, child flows) are refused;
* ``retry``: what ``loom retry`` does with a dead letter (:mod:`loom.ops.deadletters`): a
  parked execution runs again, a failed one is re-driven as a fork from its failure (once:
  a second bulk retry reports the re-drive).

``dry_run`` selects and says what each would do, and writes nothing. The report counts the
executions acted on (or that would be) and lists each, with what came of it; one failure
does not stop the others. Every call is idempotent per execution (a cancel pending stands,
a resume is keyed by its gate, a re-drive by its id), so a bulk operation that died half
way is finished by running it again: what it did is not done twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final

from loom import crash
from loom.errors import ExecutionFinishedError, InputError, LoomError
from loom.grants import recorded_by
from loom.kernel.fold import resume_key
from loom.ops.bulk_select import MAX_LIMIT, OPERATIONS, Operation, Selected, Selection, select
from loom.ops.deadletters import redrive

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.store.base import ExecutionSummary
    from loom.wire import ExecutionResult

__all__ = [
    "MAX_LIMIT",
    "OPERATIONS",
    "BulkItem",
    "BulkReport",
    "Operation",
    "Selection",
    "apply",
    "bulk",
    "select",
]

Authorize = Callable[["ExecutionSummary"], None]
"""Raises to refuse acting on one selected execution (a caller check, per execution)."""
ID_PLACEHOLDER: Final = "{execution_id}"


@dataclass(frozen=True, slots=True)
class BulkItem:
    """One execution of a bulk operation and what came of it.

    Attributes:
        execution_id: The execution.
        flow: Its flow.
        status: Where it stood when selected.
        action: What the operation does to it: ``cancel``, ``resume``, ``retry`` (a park
            lifted), ``fork`` (a failed one re-driven), ``none`` (done already: ended, or
            re-driven), ``skip`` (not one it acts on, ``detail`` says why).
        outcome: Where it stands after (``None`` on a dry run).
        detail: The gate resumed (``on/key``), the re-drive's id, or why it was skipped.
        error: Why acting on it failed (``code: message``).
    """

    execution_id: str
    flow: str
    status: str
    action: str
    outcome: str | None = None
    detail: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return asdict(self)


@dataclass
class BulkReport:
    """What a bulk operation did (or, on a dry run, would do).

    Attributes:
        operation: ``cancel``, ``resume`` or ``retry``.
        dry_run: Nothing was written.
        count: The executions acted on (or that would be): items not skipped.
        more: More executions matched than the selection's limit (run it again, or raise
            the limit, for the rest).
        items: Each execution selected, newest first (named ones in the order named),
            then each named one left out.
    """

    operation: str
    dry_run: bool
    count: int = 0
    more: bool = False
    items: list[BulkItem] = field(default_factory=list[BulkItem])

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "operation": self.operation,
            "dry_run": self.dry_run,
            "count": self.count,
            "more": self.more,
            "items": [item.to_json() for item in self.items],
        }


@dataclass(frozen=True)
class Action:
    """What a bulk operation does to each execution, besides the selection.

    Attributes:
        by: The principal who acts: the grant policy checks it (a re-drive's fork keeps
            the capabilities it may grant), and every event written records it.
        reason: A cancel's reason.
        on: A resume's gate.
        correlation_key: A resume's key (``{execution_id}`` stands for each id); none:
            the key of each execution's one open gate on ``on``.
        payload: A resume's payload.
        note: Free text recorded beside ``by`` (an operator's name); authorizes nothing.
    """

    by: str
    reason: str = ""
    on: str | None = None
    correlation_key: str | None = None
    payload: Any = None
    note: str | None = None

    @property
    def recorded(self) -> str:
        """What the events written record as ``by``: ``"{note} (via {by})"``, or ``by``."""
        return recorded_by(self.by, self.note) or self.by


def check_action(operation: Operation, action: Action) -> None:
    """Refuse what cannot be done to any execution, before anything is read.

    Raises:
        InputError: A resume without a gate, or of one of Loom's own gates.
    """
    if operation != "resume":
        return
    if not action.on:
        raise InputError("a bulk resume needs the gate to resume (on)", details={"on": None})
    if action.on.startswith("loom."):
        raise InputError(
            f"{action.on!r} is a gate of Loom's own (timers, mailboxes, child flows): Loom "
            "resumes it itself; a bulk resume cannot",
            code="reserved_gate",
            details={"on": action.on},
        )


async def bulk(
    runtime: Runtime,
    operation: Operation,
    selection: Selection | None = None,
    *,
    by: str = "operator",
    note: str | None = None,
    dry_run: bool = False,
    authorize: Authorize | None = None,
    reason: str = "",
    on: str | None = None,
    correlation_key: str | None = None,
    payload: Any = None,
) -> BulkReport:
    """Select, authorize every execution selected, then act on each (module docstring).

    ``Runtime.bulk``. ``by`` is the principal who acts, ``note`` free text recorded beside
    it; ``reason`` is a cancel's; ``on``, ``correlation_key`` and ``payload`` a resume's.
    ``authorize(row)`` raises to refuse one selected execution.

    Raises:
        InputError: The selection or the action is unusable (nothing is done).
        Exception: Whatever ``authorize`` raises for a selected execution (nothing is done).
    """
    action = Action(by, reason, on, correlation_key, payload, note)
    check_action(operation, action)
    selected = await select(runtime, operation, selection or Selection())
    for row in selected.rows:
        if authorize is not None:
            authorize(row)
    return await apply(runtime, operation, selected, action, dry_run=dry_run)


async def apply(
    runtime: Runtime,
    operation: Operation,
    selected: Selected,
    action: Action,
    *,
    dry_run: bool = False,
) -> BulkReport:
    """Act on each execution ``selected`` holds (authorized already), in its order."""
    check_action(operation, action)
    report = BulkReport(operation, dry_run, more=selected.more)
    for n, row in enumerate(selected.rows, start=1):
        item = await _ONE[operation](runtime, row, action, dry_run)
        report.items.append(item)
        crash.point("bulk_applied", str(n))  # this one done, the next not yet
    report.count = sum(1 for item in report.items if item.action not in ("skip", "none"))
    for eid, why, row in selected.skipped:
        flow, status = (row.flow, row.status) if row is not None else ("", "unknown")
        report.items.append(BulkItem(eid, flow, status, "skip", detail=why))
    return report


async def _cancel(rt: Runtime, row: ExecutionSummary, act: Action, dry: bool) -> BulkItem:
    item = BulkItem(row.execution_id, row.flow, row.status, "cancel")
    if dry:
        return item
    try:
        result = await rt.cancel(row.execution_id, act.reason, by=act.recorded)
    except ExecutionFinishedError as exc:  # it ended since it was selected
        status = str(exc.details.get("status", "finished"))
        return BulkItem(row.execution_id, row.flow, row.status, "none", status, "already ended")
    except LoomError as exc:
        return _failed(item, exc)
    return _done(item, result)


async def _resume(rt: Runtime, row: ExecutionSummary, act: Action, dry: bool) -> BulkItem:
    eid, on = row.execution_id, act.on or ""
    state = await rt.load_state(eid)
    key, why = _gate_key(state.open_gates().values(), on, act.correlation_key, eid)
    if key is None:
        settled = (
            act.correlation_key is not None and resume_key(on, _key(act, eid)) in state.resumes
        )
        if settled:  # resumed already (by a first run of this operation)
            return BulkItem(
                eid, row.flow, row.status, "none", state.status, f"{on}/{_key(act, eid)}"
            )
        return BulkItem(eid, row.flow, row.status, "skip", detail=why)
    item = BulkItem(eid, row.flow, row.status, "resume", detail=f"{on}/{key}")
    if dry:
        return item
    try:
        result = await rt.resume(eid, on, key, act.payload, by=act.recorded)
    except LoomError as exc:
        return _failed(item, exc)
    return _done(item, result)


def _key(act: Action, eid: str) -> str:
    return (act.correlation_key or "").replace(ID_PLACEHOLDER, eid)


def _gate_key(gates: Any, on: str, template: str | None, eid: str) -> tuple[str | None, str]:
    """The correlation key to resume, or ``None`` and why there is none."""
    keys = [g["correlation_key"] for g in gates if g["on"] == on]
    if template is not None:
        key = template.replace(ID_PLACEHOLDER, eid)
        return (key, "") if key in keys else (None, f"no open gate {on}/{key}")
    if len(keys) == 1:
        return keys[0], ""
    if not keys:
        return None, f"no open gate on {on}"
    return None, f"{len(keys)} open gates on {on}: name the correlation_key to resume"


async def _retry(rt: Runtime, row: ExecutionSummary, act: Action, dry: bool) -> BulkItem:
    (done,) = await redrive(rt, [row], by=act.by, note=act.note, dry_run=dry)
    return BulkItem(
        row.execution_id,
        row.flow,
        row.status,
        done.action,
        done.status,
        done.new_execution_id,
        done.error,
    )


def _done(item: BulkItem, result: ExecutionResult) -> BulkItem:
    return BulkItem(**{**item.to_json(), "outcome": result.status})


def _failed(item: BulkItem, exc: LoomError) -> BulkItem:
    return BulkItem(**{**item.to_json(), "error": f"{exc.code}: {exc.message}"})


_ONE: Final[dict[str, Callable[[Runtime, ExecutionSummary, Action, bool], Awaitable[BulkItem]]]] = {
    "cancel": _cancel,
    "resume": _resume,
    "retry": _retry,
}
