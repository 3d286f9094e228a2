"""From a recorded run to one deployment at a target start rate: the load model's arithmetic.

The run started ``S`` executions (children and schedule ticks included). At ``R`` starts a
second, what grows with the starts grows by ``R / S`` per second of run-time count, and what
runs per interval does not grow at all:

* **Documents.** An execution's own documents (its execution document, pages, inbox items,
  its queue lease and wait records) are not shared with other executions: their write rate
  is the one measured, whatever the load (the busiest 10-second window, per second). A
  document shared by executions (a queue shard's document, the layout) written on behalf
  of executions would see ``writes / S * R`` a second; written by a job, its rate is the
  writes one run of the job makes times the runs a second (one per shard and interval:
  job keys carry their interval, and the dispatcher refuses a second task of a name).
* **Index ranges.** An index entry inserted where inserts pile up (a monotonic value at
  the tail of a range: a time, or a range seen growing at its tail) counts against its
  range. Ranges under one execution keep their measured rate; shared ranges grow with the
  starts, spread over the values of their leading ``shard`` (a uniform hash of the id).
* **Task queues.** Dispatches of executions grow with the starts, spread over the queues
  of their class by shard; jobs run per shard and interval.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.scale.recorder import Insert, Recorder, Task, Write

WINDOW = 10.0  # seconds over which a rate is "sustained"
_ENTITY = (
    re.compile(r"^executions/[^/]+(/.*)?$"),
    re.compile(r"^loom_queues/[^/]+/(leases|waiting)/[^/]+$"),
    re.compile(r"^loom_queues/[^/]+/shards/\d+/(queued|freed)/[^/]+$"),
)
_ONCE = re.compile(r"^loom_meta/")  # written once in a database's life
_SHARD_VALUE = re.compile(r"^shard=\d+$")
_QUEUE_SHARD = re.compile(r"/shards/\d+/")


def is_entity(path: str) -> bool:
    """Whether a document (or an index range's parent) belongs to one execution."""
    return any(p.match(path) for p in _ENTITY)


def busiest(times: Iterable[float], window: float = WINDOW) -> float:
    """The most events in any ``window`` seconds, per second."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best / window


@dataclass
class Finding:
    """One projected rate and its budget."""

    what: str
    rate: float
    budget: float

    @property
    def ok(self) -> bool:
        return self.rate <= self.budget

    def line(self) -> str:
        mark = "ok" if self.ok else "OVER"
        return f"{self.rate:10.1f}/s  (budget {self.budget:g})  {mark}  {self.what}"


@dataclass
class Model:
    """The projection of one recorded run (see the module docstring).

    Attributes:
        starts: Executions the run started.
        target: Starts a second to project to.
        shards: The store's shards (a shared range led by ``shard`` is one of these).
        intervals: Seconds between two runs of a job of each kind (per shard).
        queue_counts: Task queues per class.
        queue_shards: Admit shards of each declared queue (its ranges spread over them).
    """

    recorder: Recorder
    starts: int
    target: float
    shards: int
    intervals: dict[str, float]
    queue_counts: dict[str, int]
    queue_shards: dict[str, int]
    findings: dict[str, list[Finding]] = field(default_factory=dict[str, list[Finding]])

    @property
    def scale(self) -> float:
        return self.target / self.starts

    # -- documents ---------------------------------------------------------------------

    def documents(self, budget: float) -> list[Finding]:
        """The sustained write rate of every document (its busiest projected rate)."""
        by_doc: dict[str, list[Write]] = defaultdict(list)
        for w in self.recorder.writes:
            by_doc[w.path].append(w)
        found = [self._document(path, writes, budget) for path, writes in by_doc.items()]
        return self._keep("documents", found)

    def _document(self, path: str, writes: list[Write], budget: float) -> Finding:
        if _ONCE.match(path):
            return Finding(f"{path} (once per database: {len(writes)} write(s))", 0.0, budget)
        if is_entity(path):
            return Finding(path, busiest(w.at for w in writes), budget)
        return Finding(f"{path} (shared)", self._grown(writes), budget)

    def _grown(self, records: list[Any]) -> float:
        """The projected rate of shared records: per start, or per job run."""
        per_start = sum(1 for r in records if r.cause == "execution") * self.scale
        # (a job's cause is ``job:{kind}:{key}``: one run each)
        runs: Counter[str] = Counter(r.cause for r in records if r.cause.startswith("job:"))
        per_job = max(
            (n / self.intervals[cause.split(":")[1]] for cause, n in runs.items()), default=0.0
        )
        return per_start + per_job

    # -- index ranges --------------------------------------------------------------------

    def ranges(self, budget: float) -> list[Finding]:
        """The insert rate at the tail of every monotonic index range."""
        by_range: dict[tuple[str, ...], list[Insert]] = defaultdict(list)
        for i in self.recorder.inserts:
            by_range[i.range].append(i)
        monotonic = {r: xs for r, xs in by_range.items() if _piles_up(xs)}
        families: dict[tuple[str, ...], list[Insert]] = defaultdict(list)
        found: list[Finding] = []
        for key, inserts in monotonic.items():
            scope = key[1] if len(key) > 1 else ""
            if is_entity(scope):
                found.append(Finding(" ".join(key), busiest(i.at for i in inserts), budget))
            else:
                families[_family(key)].extend(inserts)
        for family, inserts in families.items():
            spread = self.shards if any(part == "shard=*" for part in family) else 1
            spread *= self._queue_shards(family)
            rate = self._grown(inserts) / spread
            found.append(Finding(" ".join(family), rate, budget))
        return self._keep("index ranges", found)

    def _queue_shards(self, family: tuple[str, ...]) -> int:
        """How many admit shards a queue's range is spread over."""
        for part in family:
            found = re.match(r"^loom_queues/([^/]+)/shards/\*/", part)
            if found:
                return self.queue_shards.get(found.group(1), 1)
        return 1

    # -- task queues -------------------------------------------------------------------

    def queues(self, budget: float) -> list[Finding]:
        """Dispatches a second on each queue."""
        per_class: Counter[str] = Counter()
        jobs: dict[str, set[tuple[str, int]]] = defaultdict(set)
        for t in self.recorder.tasks:
            klass = queue_class(t.queue)
            if t.kind == "execute":
                per_class[klass] += 1
            elif t.kind != "job:admit":  # (admit passes: every declared shard, below)
                jobs[t.queue].add((t.kind, _job_family(t)))
        found: list[Finding] = []
        for klass, n in per_class.items():
            rate = n * self.scale / self.queue_counts[klass]
            found.append(Finding(f"each {klass} queue: executions' dispatches", rate, budget))
        for queue, families in jobs.items():
            rate = sum(1 / self.intervals[kind.split(":")[1]] for kind, _ in families)
            found.append(Finding(f"{queue}: jobs", rate, budget))
        # Every admit shard of every queue busy: a pass each a second, spread by shard.
        passes = sum(self.queue_shards.values()) / self.intervals["admit"]
        share = passes / self.queue_counts["admission"]
        found.append(Finding("each admission queue: admit passes", share, budget))
        return self._keep("task queues", found)

    def _keep(self, name: str, found: list[Finding]) -> list[Finding]:
        found.sort(key=lambda f: -f.rate / f.budget if f.budget else 0)
        self.findings[name] = found
        return found

    def report(self, top: int = 8) -> str:
        """The busiest findings of each kind, for the test's output."""
        lines = [f"{self.starts} executions started; projected to {self.target:g} starts/s"]
        for name, found in self.findings.items():
            lines.append(f"-- {name} (busiest {min(top, len(found))} of {len(found)})")
            lines += ["   " + f.line() for f in found[:top]]
        return "\n".join(lines)


def queue_class(queue: str) -> str:
    """The class of a queue of the family (``{prefix}-{class}-{i}``)."""
    return queue.rsplit("-", 2)[-2]


def _job_family(task: Task) -> int:
    """A job's routing, its interval dropped (``admit:work/3@1700000001.000`` → one family
    per queue shard)."""
    return hash(task.key.rsplit("@", 1)[0])


def _piles_up(inserts: list[Insert]) -> bool:
    """Whether the range's inserts land at its tail: a time (epoch seconds, or a datetime),
    or most inserts above every value before them."""
    values = [i.value for i in inserts]
    if any(isinstance(v, float) and 1e9 < v < 1e10 for v in values):
        return True
    if len(values) < 5 or not all(isinstance(v, int | float) for v in values):
        return False
    top, tail = None, 0
    for v in values:
        if top is None or v > top:
            tail += 1
            top = v
    return tail / len(values) >= 0.8


def _family(key: tuple[str, ...]) -> tuple[str, ...]:
    """A shared range with its shard value (and a queue's admit shard) made a wildcard."""
    parts = [_QUEUE_SHARD.sub("/shards/*/", p) for p in key]
    return tuple("shard=*" if _SHARD_VALUE.match(p) else p for p in parts)
