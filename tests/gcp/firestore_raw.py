"""An execution's log as Firestore holds it, read from the raw documents, not the store.

Tests that look for a forked log cannot ask the store: its readers merge the runs of events
(the start and ``head`` on the execution document, the end riding it, the page documents)
by seq and would hide two runs claiming one seq. :func:`raw_log` returns every run as it is
stored; :func:`log_problems` says what is wrong with them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from google.cloud import firestore

from loom.events import TERMINAL_TYPES


@dataclass(frozen=True)
class Run:
    """Consecutive events stored together: a page document, or a run on the execution
    document (``where``: ``start`` or ``end``)."""

    where: str
    first: int
    bodies: list[str]

    @property
    def seqs(self) -> range:
        return range(self.first, self.first + len(self.bodies))


@dataclass
class RawLog:
    """An execution document's summary fields and every run of events stored for it."""

    execution_id: str
    fields: dict[str, Any]
    runs: list[Run] = field(default_factory=list[Run])

    def events(self) -> list[dict[str, Any]]:
        """Every stored event, parsed, in seq order (a seq stored twice appears twice)."""
        stored = [
            (seq, json.loads(body))
            for run in self.runs
            for seq, body in zip(run.seqs, run.bodies, strict=True)
        ]
        return [event for _, event in sorted(stored, key=lambda pair: pair[0])]


def _runs_on_document(fields: Mapping[str, Any]) -> list[Run]:
    runs: list[Run] = []
    if fields.get("start") is not None:
        head = cast("list[Any]", fields.get("head") or [])
        runs.append(Run("start", 1, [str(fields["start"]), *(str(b) for b in head)]))
    end = cast("Mapping[str, Any] | None", fields.get("end"))
    if end:
        runs.append(Run("end", int(end["seq"]), [str(b) for b in end["bodies"]]))
    return runs


async def raw_log(client: firestore.AsyncClient, execution_id: str) -> RawLog:
    """The execution document and its event pages as stored."""
    ref = client.collection("executions").document(execution_id)
    doc = await ref.get()
    fields = doc.to_dict() or {}
    log = RawLog(execution_id, fields, _runs_on_document(fields))
    async for page in ref.collection("events").stream():
        data = page.to_dict() or {}
        bodies = data.get("bodies")
        if bodies is None:  # the previous layout: one event per document
            bodies = [data["body"]]
        log.runs.append(Run(f"page {page.id}", int(data["seq"]), [str(b) for b in bodies]))
    return log


def log_problems(log: RawLog) -> list[str]:
    """What breaks "one gap-free log, nothing after its end": seqs stored twice, gaps,
    more than one terminal event, events after one, bodies numbered otherwise."""
    problems: list[str] = []
    owners: dict[int, str] = {}
    for run in log.runs:
        for seq, body in zip(run.seqs, run.bodies, strict=True):
            if seq in owners:
                problems.append(f"seq {seq} stored twice ({owners[seq]}, {run.where})")
            owners[seq] = run.where
            if json.loads(body).get("seq") != seq:
                problems.append(f"{run.where} holds seq {json.loads(body).get('seq')} at {seq}")
    seqs = sorted(owners)
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"seqs not gap-free from 1: {seqs}")
    types = [e["type"] for e in log.events()]
    ends = [i for i, t in enumerate(types) if t in TERMINAL_TYPES]
    if len(ends) > 1:
        problems.append(f"{len(ends)} terminal events: {[types[i] for i in ends]}")
    if ends and ends[0] != len(types) - 1:
        problems.append(f"events after {types[ends[0]]}: {types[ends[0] + 1 :]}")
    return problems
