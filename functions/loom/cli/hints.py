"""What the CLI tells a person beyond the result: a resume no gate waits for, a failed
execution's exit code, an interrupted command's execution that is still running.

Exit codes of the commands that run an execution (``start``, ``execute``, ``resume``):
0 when it ran and did not fail, 1 when the execution failed, 2 for bad input (and a
``--strict`` resume no gate waits for), 75 when the store failed, 130 on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from loom.cli.authority import local_principal
from loom.errors import NoOpenGateError
from loom.kernel.late_replies import timed_out_gate

if TYPE_CHECKING:
    from loom.runtime import Runtime
    from loom.store.base import ExecutionSummary
    from loom.wire import ExecutionResult


EX_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C
EX_FAILED = 1


async def unmatched_gate(runtime: Runtime, execution_id: str, on: str, key: str) -> str | None:
    """Why a resume ``(on, key)`` reaches no open gate of the execution, or ``None``.

    A resume that arrives before its gate opens is buffered, which is right for events
    that race their gate; but a typo in ``--on`` or ``--key`` looks just like that.
    """
    state = await runtime.load_state(execution_id)
    if state.finished or timed_out_gate(state, on, key) is not None:
        return None  # the resume itself says so (a gate that timed out: gate_timed_out)
    gates = list(state.open_gates().values())
    if any(g["on"] == on and g["correlation_key"] == key for g in gates):
        return None
    waiting = ", ".join(f"{g['on']!r} (key {g['correlation_key']!r})" for g in gates)
    return f"no open gate {on!r} with key {key!r} on {execution_id!r}" + (
        f"; it waits on {waiting}" if waiting else "; it waits on no gate now"
    )


async def resume_checked(
    runtime: Runtime, execution_id: str, on: str, key: str, payload: Any, strict: bool
) -> None:
    """Resume as the CLI's user; warn (or, ``strict``, refuse) when no open gate matches.

    Raises:
        NoOpenGateError: ``strict`` and no open gate matches (nothing appended).
    """
    reason = await unmatched_gate(runtime, execution_id, on, key)
    if reason is not None and strict:
        raise NoOpenGateError(reason, details={"on": on, "correlation_key": key})
    await runtime.resume(execution_id, on, key, payload, by=local_principal())
    if reason is not None:
        warn_buffered(reason)


def warn_buffered(reason: str) -> None:
    """Say that a resume nobody waits for was buffered, and how to refuse it instead."""
    click.secho(
        f"warning: {reason}; buffered: the flow gets it if it ever waits on that gate "
        "(--strict refuses a resume no gate waits for)",
        fg="yellow",
        err=True,
    )


def exit_for(result: ExecutionResult) -> None:
    """Exit non-zero when the execution the command ran has failed."""
    if result.status == "failed":
        sys.exit(EX_FAILED)


def interrupted(execution_id: str | None, claim_ttl: float) -> None:
    """Ctrl-C: the execution is not stopped, only this process; say how to continue it."""
    if execution_id is None:
        click.secho("interrupted", fg="yellow", err=True)
    else:
        click.secho(
            f"interrupted: execution {execution_id!r} is still running (its log keeps every "
            f"step recorded so far). Continue it with `loom execute {execution_id}` once "
            f"this process's claim lapses (within {claim_ttl:g} s), or let `loom serve` pick "
            f"it up; `loom cancel {execution_id}` stops it.",
            fg="yellow",
            err=True,
        )
    sys.exit(EX_INTERRUPTED)


def list_json(
    rows: Sequence[ExecutionSummary], doubts: dict[str, ExecutionResult]
) -> list[dict[str, Any]]:
    """``loom ls --json``: one object per execution (in-doubt steps included)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        doc = dataclasses.asdict(row)
        result = doubts.get(row.execution_id)
        doc["in_doubt"] = [d.model_dump(mode="json") for d in result.in_doubt] if result else []
        out.append(doc)
    return out
