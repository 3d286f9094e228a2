"""A child process for the group-commit crash tests: concurrent appends until it dies.

``python -m tests.store.group_writer DB EXECUTIONS ROUNDS [off-loop]`` creates the
executions, then in each round appends three events to every execution at once. After each
append returns it prints ``ack <execution> <last seq>`` and flushes: the parent knows what
was acknowledged when it kills this process.
"""

from __future__ import annotations

import asyncio
import sys

from loom.events import EffectCompleted, ExecutionStarted
from loom.store import AppendRequest, SqliteEventStore

EVENTS_PER_APPEND = 3


def _ack(eid: str, seq: int) -> None:
    sys.stdout.write(f"ack {eid} {seq}\n")
    sys.stdout.flush()


async def _chain(store: SqliteEventStore, eid: str, rounds: int) -> None:
    await store.create(ExecutionStarted(execution_id=eid, flow="f", input={"n": 1}))
    _ack(eid, 1)
    last = 1
    for r in range(rounds):
        events = [
            EffectCompleted(seq=last + i, step_id=f"{r}.{i}", effect="fx", output="x" * 200, at=1.0)
            for i in range(1, EVENTS_PER_APPEND + 1)
        ]
        last = await store.append(AppendRequest(eid, last, events))
        _ack(eid, last)


async def main(path: str, executions: int, rounds: int, off_loop: bool) -> None:
    store = SqliteEventStore(path)
    if off_loop:
        store.serve_off_loop()
    await asyncio.gather(*(_chain(store, f"g{i}", rounds) for i in range(executions)))
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["off-loop"]))
