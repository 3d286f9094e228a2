"""Dead letters: executions parked or failed, listed and re-driven in bulk.

``loom retry --status failed|poison|parked [--flow F] [--since 2h] [--dry-run]`` and
``POST /dead-letters/retry`` (``GET /dead-letters`` lists) select executions by status:

* ``poison``: parked because execute calls kept dying at the same place (``loom.kernel.poison``);
* ``parked``: parked for any reason (poison, or a replay that diverged from the log);
* ``failed``: ended as failed. A failed execution is final and stays so.

Re-driving a parked execution is ``Runtime.retry``: its park is lifted and it runs again on the
deployed code. Re-driving a failed one is a fork (``loom.ops.fork``) that reuses every step before
the one that failed it (the last step to fail, when the failure came right after it; otherwise
all its steps, the flow's own code running again from there). The fork's id is derived from the
original's and the failure's position (:func:`redrive_id`), so re-driving twice starts one
execution, and a letter already re-driven is reported as such. ``--dry-run`` lists what would
be done and writes nothing. One letter's failure to re-drive is reported with it and does not
stop the others.

What a bulk re-drive selects (``bulk=True`` of :func:`find`): the executions of the kind (and
flow, and changed since) that are not themselves re-drives. A re-drive that failed again is
reported under its original (``none``: already re-driven, with the re-drive's status), so a
second bulk retry of the same selection starts nothing new, however often it runs. A re-drive
is an execution forked from another (``forked_from``) under that one's :func:`redrive_id`.
One execution, a failed re-drive included, is re-driven by its id (:func:`redrive_by_id`,
``loom retry ID``). The listing (``GET /dead-letters``) shows every execution of the kind.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from loom import events as ev
from loom.errors import InputError, LoomError, ReservedExecutionIdError, UnknownExecutionError
from loom.grants import recorded_by
from loom.ids import check_execution_id, id_problem
from loom.kernel.poison import POISON
from loom.ops.fork import fork
from loom.ops.retention import parse_age
from loom.store.base import ExecutionSummary, ListCursor

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

Kind = Literal["failed", "poison", "parked"]
KINDS: Final[tuple[Kind, ...]] = ("failed", "poison", "parked")
_PAGE: Final = 200


@dataclass(frozen=True, slots=True)
class Redrive:
    """One dead letter and what re-driving it does (or did).

    Attributes:
        execution_id: The dead letter.
        flow: Its flow.
        reason: Why it is a dead letter (the park reason, or the failure).
        action: ``retry`` (lift the park), ``fork`` (a new execution), or ``none`` (already
            re-driven as ``new_execution_id``).
        new_execution_id: The fork's id, for a failed execution.
        status: Where it stands after the re-drive (``None`` on a dry run).
        error: Why re-driving it failed, if it did.
    """

    execution_id: str
    flow: str
    reason: str
    action: str
    new_execution_id: str | None = None
    status: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return asdict(self)


def parse_since(text: str, now: float) -> float:
    """Epoch seconds from an age back from ``now`` (``2h``, ``30m``, ``7d``) or an ISO time.

    Raises:
        InputError: Neither.
    """
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            return now - parse_age(text)
        except InputError:
            raise InputError(
                f"--since must be an age such as 2h, 30m or 7d, or an ISO-8601 time with its "
                f"offset; got {text!r}",
                details={"since": text},
            ) from None
    if when.tzinfo is None:
        raise InputError(
            f"--since {text!r} has no UTC offset; add one (e.g. {text}+00:00)",
            details={"since": text},
        )
    return when.timestamp()


def check_kind(kind: str) -> Kind:
    """``kind`` if it is one of :data:`KINDS`; else :class:`InputError`."""
    for known in KINDS:
        if kind == known:
            return known
    raise InputError(
        f"status must be one of {', '.join(KINDS)}, not {kind!r}", details={"status": kind}
    )


async def find(
    runtime: Runtime,
    kind: Kind,
    *,
    flow: str | None = None,
    since: float | None = None,
    limit: int = 1000,
    bulk: bool = False,
) -> list[ExecutionSummary]:
    """Dead letters of ``kind``, oldest first, at most ``limit`` (the store's summaries);
    with ``bulk``, what a bulk re-drive selects: re-drives left out (module docstring)."""
    found: list[ExecutionSummary] = []
    async for row in _rows(runtime, _status(kind)):
        if _matches(row, kind, flow, since) and not (bulk and await is_redrive(runtime, row)):
            found.append(row)
            if len(found) >= limit:
                break
    return found


async def find_named(
    runtime: Runtime,
    ids: Sequence[str],
    kind: Kind,
    *,
    flow: str | None = None,
    since: float | None = None,
    limit: int = 1000,
) -> list[ExecutionSummary]:
    """The executions of ``ids`` that :func:`find` would select (re-drives included), in
    that order, at most ``limit``; an unknown id is no dead letter, and is left out."""
    found: list[ExecutionSummary] = []
    for eid in ids:
        try:
            row = await runtime.store.summary(eid)
        except UnknownExecutionError:
            continue
        if row.status == _status(kind) and _matches(row, kind, flow, since):
            found.append(row)
    return found[:limit]


def _status(kind: Kind) -> str:
    """The summary status of dead letters of ``kind`` (a park keeps an execution suspended)."""
    return "failed" if kind == "failed" else "suspended"


_REDRIVE_FORM: Final = re.compile(r".+\.redrive-([0-9]+)", re.DOTALL)


async def is_redrive(runtime: Runtime, row: ExecutionSummary) -> bool:
    """Whether ``row`` is the re-drive of another execution: forked from it under its
    :func:`redrive_id` (only an id of that form costs a read)."""
    form = _REDRIVE_FORM.fullmatch(row.execution_id)
    if form is None or row.status != "failed":  # (only failed letters are forked)
        return False
    first = (await runtime.store.read(row.execution_id))[0]
    origin = first.forked_from if isinstance(first, ev.ExecutionStarted) else None
    return origin is not None and row.execution_id == redrive_id(
        origin.execution_id, int(form.group(1))
    )


def _matches(row: ExecutionSummary, kind: Kind, flow: str | None, since: float | None) -> bool:
    if flow is not None and row.flow != flow:
        return False
    if since is not None and row.updated_at < since:
        return False
    if kind == "failed":
        return True
    reason = row.parked_reason or ""
    return bool(reason) and (kind == "parked" or reason.startswith(POISON))


async def _rows(runtime: Runtime, status: str) -> AsyncIterator[ExecutionSummary]:
    after: ListCursor | None = None
    while True:
        rows = await runtime.store.list(status, limit=_PAGE, oldest_first=True, after=after)
        for row in rows:
            yield row
        if len(rows) < _PAGE:
            return
        after = rows[-1].cursor


async def redrive(
    runtime: Runtime,
    letters: Sequence[ExecutionSummary],
    *,
    by: str,
    note: str | None = None,
    dry_run: bool = False,
) -> list[Redrive]:
    """Re-drive each letter (see the module docstring); on ``dry_run`` only say how.

    ``by`` is the principal who re-drives: a fork keeps the original's capabilities only if
    the grant policy lets ``by`` grant them. ``note`` (free text, e.g. a name typed by an
    operator) is recorded beside it and authorizes nothing.
    """
    return [await _one(runtime, row, (by, note), dry_run) for row in letters]


async def redrive_by_id(
    runtime: Runtime,
    execution_id: str,
    *,
    by: str,
    note: str | None = None,
    capabilities: Sequence[str] = (),
) -> Redrive:
    """Re-drive one execution, whatever selected it: a failed one (a failed re-drive too) is
    forked as a bulk re-drive would, a parked one retried (``by``, ``note``: see
    :func:`redrive`).

    ``capabilities`` are added to a failed execution's fork (see :func:`loom.ops.fork.fork`:
    ``by`` must be allowed to grant them); a parked execution runs on in place with what it
    was started with, so it takes none.

    Raises:
        UnknownExecutionError: No such execution.
        NotParkedError: It is neither failed nor parked.
        InputError: Capabilities asked for an execution that is not failed.
    """
    row = await runtime.store.summary(check_execution_id(execution_id))
    if row.status != "failed":
        if capabilities:
            raise InputError(
                f"{execution_id!r} is {row.status}, not failed: a retry runs it on in place "
                "with the capabilities it was started with; capabilities can be added only to "
                "the re-drive of a failed execution (a fork)",
                code="invalid_request",
                details={"status": row.status},
            )
        result = await runtime.retry(execution_id, by=recorded_by(by, note) or by)
        return Redrive(
            execution_id, row.flow, row.parked_reason or "", "retry", None, result.status
        )
    return await _one(runtime, row, (by, note), False, tuple(capabilities))


async def _one(
    runtime: Runtime,
    row: ExecutionSummary,
    who: tuple[str, str | None],
    dry_run: bool,
    capabilities: tuple[str, ...] = (),
) -> Redrive:
    by, note = who
    if row.status != "failed":
        plan = Redrive(row.execution_id, row.flow, row.parked_reason or "", "retry")
        if dry_run:
            return plan  # (the retry's coroutine is not even built: never awaited, it warns)
        return await _attempt(plan, runtime.retry(row.execution_id, by=recorded_by(by, note) or by))
    events = await runtime.history(row.execution_id)
    cut, step = failure_point(events)
    new_id = redrive_id(row.execution_id, cut)
    reason = _failure(events)
    if await _exists(runtime, new_id):
        return await _existing(runtime, row, reason, new_id)
    plan = Redrive(row.execution_id, row.flow, reason, "fork", new_id)
    if dry_run:
        return plan
    options: dict[str, Any] = {"from_seq": cut} if step is None else {"from_step": step}
    options["capabilities"] = capabilities
    forked = fork(
        runtime, row.execution_id, new_id=new_id, by=by, note=note, derived="redrive", **options
    )
    return await _attempt(plan, forked)


async def _existing(runtime: Runtime, row: ExecutionSummary, reason: str, new_id: str) -> Redrive:
    """The letter already re-driven as ``new_id``: reported only if that execution is the
    engine's re-drive of it (forked from it), never a squatter's under the same id."""
    first = (await runtime.store.read(new_id))[0]
    origin = first.forked_from if isinstance(first, ev.ExecutionStarted) else None
    if origin is None or origin.execution_id != row.execution_id:
        error = (
            f"{ReservedExecutionIdError.code}: {new_id!r}, the id of this letter's re-drive, "
            "is held by an execution that is not its re-drive; nothing was re-driven"
        )
        return Redrive(row.execution_id, row.flow, reason, "none", new_id, None, error)
    status = (await runtime.store.summary(new_id)).status
    return Redrive(row.execution_id, row.flow, reason, "none", new_id, status)


async def _attempt(plan: Redrive, call: Awaitable[ExecutionResult]) -> Redrive:
    try:
        result = await call
    except LoomError as exc:
        return Redrive(**{**plan.to_json(), "error": f"{exc.code}: {exc.message}"})
    return Redrive(**{**plan.to_json(), "status": result.status})


def failure_point(events: Sequence[ev.Event]) -> tuple[int, str | None]:
    """Where a failed execution is re-run from: ``(seq, step)`` of the step whose failure
    ended it, or ``(seq of the failure, None)`` when the flow's own code raised."""
    last = events[-1]
    before = next(
        (e for e in reversed(events[:-1]) if getattr(e, "step_id", None) is not None), None
    )
    if isinstance(before, ev.EffectFailed):
        return before.seq, before.step_id
    return last.seq, None


def redrive_id(execution_id: str, seq: int) -> str:
    """The id of the fork that re-drives ``execution_id`` failed at ``seq`` (within the id
    rule: a long id is shortened with a hash of it)."""
    candidate = f"{execution_id}.redrive-{seq}"
    if id_problem(candidate) is None:
        return candidate
    digest = hashlib.sha256(execution_id.encode()).hexdigest()[:16]
    return f"{execution_id[:160]}~{digest}.redrive-{seq}"


def _failure(events: Sequence[ev.Event]) -> str:
    last = events[-1]
    if isinstance(last, ev.ExecutionFailed):
        return f"{last.error.code}: {last.error.message}"
    return last.type


async def _exists(runtime: Runtime, execution_id: str) -> bool:
    try:
        await runtime.store.summary(execution_id)
    except UnknownExecutionError:
        return False
    return True
