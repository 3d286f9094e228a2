"""The execution page: where one execution stands, what may still be done to it, its links
and its timeline; and one recorded value read back on demand.

What the page offers follows what could succeed, as the API would decide it: a finished
execution shows no resume form, no verdict form and no cancel (each would be refused 409);
a parked one offers a retry, a failed one a re-drive, and an execution that stopped (ended
or parked) a fork from any of its recorded steps.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Request

from loom.errors import InputError
from loom.ids import check_execution_id
from loom.kernel.fold import ExecutionState
from loom.ops.fork import recorded_steps
from loom.store.base import ExecutionSummary
from loom.wire import ExecutionResult
from loom.workers.console.lineage import Lineage, lineage
from loom.workers.console.timeline import PAYLOAD_FIELDS, build, pretty
from loom.workers.http_base import Services, run

EVENTS_PER_PAGE = 500


def bad_query(message: str) -> InputError:
    """The error for a console URL's query parameter that cannot be used (answered 400)."""
    return InputError(message, code="invalid_request")


def is_seq(raw: str) -> bool:
    """Whether ``raw`` is a seq the store can look up: ASCII digits (``str.isdigit`` passes
    "²", which ``int`` refuses), and at most 18 of them (SQLite integers are 64-bit; a larger
    one was a 500)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= 18


def _from_seq(req: Request) -> int:
    raw = req.args.get("from_seq", "0")
    if not is_seq(raw.removeprefix("-")):
        raise bad_query(f"from_seq must be a whole number, not {raw[:40]!r}")
    return max(0, int(raw))


def actions_for(state: ExecutionState, lineage_: Lineage) -> dict[str, bool]:
    """Which of the page's actions could succeed on ``state`` (what the API would accept)."""
    finished = state.finished
    parked = bool(state.parked_reason) and not finished
    return {
        "resume": not finished,
        "verdict": not finished and bool(state.in_doubt),
        "cancel": not finished,
        "retry": parked,
        "redrive": state.status == "failed" and lineage_.redrive is not None,
        "fork": finished or parked,
    }


def execution_page(s: Services, req: Request, execution_id: str) -> dict[str, Any]:
    """One execution: where it stands, its gates, timers, claim, doubts, links and timeline."""
    check_execution_id(execution_id)
    from_seq = _from_seq(req)

    async def read() -> tuple[ExecutionSummary, ExecutionState, list[Any], Lineage]:
        summary = await s.runtime.require(execution_id)
        state = await s.runtime.load_state(execution_id)
        events = await s.runtime.store.read(execution_id, after_seq=from_seq)
        links = await lineage(s.runtime, state, events, whole=from_seq == 0)
        return summary, state, events, links

    summary, state, events, links = run(read())
    shown = events[:EVENTS_PER_PAGE]
    result = ExecutionResult.from_state(state, include_state=False)
    finished = state.finished
    backoffs = {sid: r["not_before"] for sid, r in state.steps.items() if "not_before" in r}
    return {
        "summary": summary,
        "state": state,
        "result": result,
        # A finished execution waits on nothing, whatever gates its log left open.
        "gates": {} if finished else state.open_gates(),
        "backoffs": {} if finished else backoffs,
        "timeline": build(shown, time.time(), finished),
        "next_seq": shown[-1].seq if len(events) > len(shown) else None,
        "from_seq": from_seq,
        "input": pretty(events[0].input) if from_seq == 0 and events else None,
        "output": pretty(state.output) if state.output is not None else None,
        "error": pretty(state.error) if state.error is not None else None,
        "lineage": links,
        "can": actions_for(state, links),
        "fork_steps": recorded_steps(events) if from_seq == 0 else [],
    }


def payload_text(s: Services, execution_id: str, seq_raw: str, name: str) -> str:
    """One recorded value of one event as indented JSON, read back from its blob if needed.

    Raises:
        InputError: A bad seq or field name, or an event without that value.
    """
    check_execution_id(execution_id)
    if name not in PAYLOAD_FIELDS:
        raise bad_query(f"field must be one of {', '.join(PAYLOAD_FIELDS)}, not {name!r}")
    if not is_seq(seq_raw) or int(seq_raw) < 1:
        raise bad_query(f"seq must be a positive whole number, not {seq_raw!r}")
    seq = int(seq_raw)

    async def read() -> Any:
        await s.runtime.require(execution_id)
        events = await s.runtime.store.read(execution_id, after_seq=seq - 1)
        if not events or events[0].seq != seq or getattr(events[0], name, None) is None:
            raise bad_query(f"event {seq} of {execution_id!r} records no {name}")
        stored = getattr(events[0], name)
        if name == "error":
            return stored.model_dump() if hasattr(stored, "model_dump") else stored
        return await s.runtime.payloads.decode(stored, execution_id)

    return pretty(run(read()))


def live_token(s: Services, execution_id: str) -> dict[str, Any]:
    """What the page polls to know it is stale: the log's last seq and the status."""
    check_execution_id(execution_id)
    row = run(s.runtime.require(execution_id))
    return {"token": f"{row.last_seq}:{row.status}", "last_seq": row.last_seq, "status": row.status}
