"""``GET /executions/{id}``: where an execution stands, and its history a page at a time.

Mounted by :mod:`loom.workers.http_routes`. The history comes in pages of at most ``limit``
events (default :data:`HISTORY_PAGE`) after seq ``after``; ``next_after`` names the next
page's ``after`` while more follow. A whole log that fits one page is returned with the
state folded from those very events; a page comes with the execution's state now.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask import Request

from loom.ids import check_execution_id
from loom.kernel.fold import fold
from loom.primitives.continuation import page_runs, run_chain
from loom.workers.http_base import HttpError, Reply, Services, run
from loom.workers.http_models import ExecutionView
from loom.workers.logs import bind


def _flag(request: Request, name: str, default: bool) -> bool:
    raw = request.args.get(name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise HttpError(
        400,
        "invalid_request",
        f"query parameter {name!r} must be true or false",
        {"parameter": name},
    )


HISTORY_PAGE = 1000
"""Events ``GET /executions/{id}`` returns at most, unless ``limit`` asks for fewer."""
MAX_HISTORY_PAGE = 10_000


def _int_arg(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise HttpError(
            400,
            "invalid_request",
            f"query parameter {name!r} must be an integer from {low} to {high}, got {raw!r}",
            {"parameter": name},
        )
    return int(raw)


def get_execution(s: Services, request: Request, args: Sequence[str]) -> Reply:
    """``GET /executions/{id}[?history=false][&after=SEQ][&limit=N]``: state and history,
    a page of at most ``limit`` events (default :data:`HISTORY_PAGE`) after seq ``after``;
    ``next_after`` names the next page's ``after`` while there are more."""
    execution_id = check_execution_id(args[0])
    bind(execution_id=execution_id)
    with_history = _flag(request, "history", True)
    after = _int_arg(request, "after", 0, 0, 2**53)
    limit = _int_arg(request, "limit", HISTORY_PAGE, 1, MAX_HISTORY_PAGE)

    async def view() -> ExecutionView:
        await s.runtime.require(execution_id)
        if not with_history:
            return ExecutionView(execution=await s.runtime.result(execution_id))
        events = await s.runtime.store.read_page(execution_id, after, limit + 1)
        if after == 0 and len(events) <= limit:
            # The whole log in one read: the state is folded from the very events returned.
            execution = await s.runtime.report(fold(events))
            return ExecutionView(
                execution=execution, history=events, runs=run_chain(execution_id, events)
            )
        page = events[:limit]
        state = await s.runtime.load_state(execution_id)
        more = len(events) > limit
        return ExecutionView(
            execution=await s.runtime.report(state),
            history=page,
            runs=page_runs(execution_id, page, state),
            next_after=page[-1].seq if more and page else None,
        )

    return 200, run(view())
