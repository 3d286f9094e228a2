"""What a deployment does to Firestore and Cloud Tasks, recorded at the clients.

:class:`Recorder` wraps the GAPIC calls of the store's Firestore client (``Commit``,
``BatchGetDocuments``, ``RunQuery``, ``RunAggregationQuery``) and the dispatcher's Cloud
Tasks client (``CreateTask``), below everything Loom does, so nothing escapes it. Each
write is kept with its document and the index entries it inserts (a shadow copy of every
document written gives the entries before and after, :mod:`tests.scale.firestore_model`);
each query with its shape; each task with its queue. Every record carries its *cause*:
``execution`` for what executions do (it grows with the starts), or the kind of job that
made it (``job:admit``, ``job:purge``…: it runs once per shard and interval, whatever the
load), or what the test itself asked (``console``).
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from google.cloud.firestore_v1 import (
    _helpers,  # pyright: ignore[reportPrivateUsage]
    types,
)

from tests.scale.firestore_model import Declared, Query, entries

CAUSE: contextvars.ContextVar[str] = contextvars.ContextVar("loom_load_cause", default="execution")


@dataclass(frozen=True, slots=True)
class Write:
    at: float
    path: str
    delete: bool
    cause: str


@dataclass(frozen=True, slots=True)
class Insert:
    """One index entry a write inserted (new, or moved because a field changed)."""

    at: float
    range: tuple[str, ...]
    value: Any
    path: str
    cause: str


@dataclass(frozen=True, slots=True)
class Read:
    at: float
    query: Query | None  # None: documents read by reference
    docs: int
    cause: str


@dataclass(frozen=True, slots=True)
class Task:
    at: float
    queue: str
    name: str
    kind: str  # execute | job:{kind}
    key: str  # the dispatch id or the job id
    cause: str


@dataclass
class Recorder:
    """See the module docstring."""

    declared: Declared
    writes: list[Write] = field(default_factory=list[Write])
    inserts: list[Insert] = field(default_factory=list[Insert])
    reads: list[Read] = field(default_factory=list[Read])
    tasks: list[Task] = field(default_factory=list[Task])
    docs: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    client: Any = None

    # -- Firestore ------------------------------------------------------------------------

    def watch_firestore(self, client: Any) -> None:
        """Wrap ``client``'s GAPIC calls (an ``AsyncClient``)."""
        self.client = client
        api: Any = client._firestore_api  # pyright: ignore[reportPrivateUsage]
        api.commit = self._wrap(api.commit, self._commit, types.CommitRequest)
        api.batch_get_documents = self._wrap(
            api.batch_get_documents, self._get, types.BatchGetDocumentsRequest
        )
        api.run_query = self._wrap(api.run_query, self._query, types.RunQueryRequest)
        api.run_aggregation_query = self._wrap(
            api.run_aggregation_query, self._aggregation, types.RunAggregationQueryRequest
        )

    def _wrap(
        self, call: Callable[..., Any], note: Callable[[Any], None], kind: Any
    ) -> Callable[..., Any]:
        async def recorded(*args: Any, **kwargs: Any) -> Any:
            request = kwargs.get("request", args[0] if args else None)
            result = await call(*args, **kwargs)
            # (after the call: a commit that failed wrote nothing)
            note(kind(request) if isinstance(request, dict) else request)
            return result

        return recorded

    def _commit(self, request: Any) -> None:
        now, cause = time.time(), CAUSE.get()
        for write in request.writes:
            if write.delete:
                path = _short(write.delete)
                self.writes.append(Write(now, path, True, cause))
                self.docs.pop(path, None)
                continue
            doc = write.update
            path = _short(doc.name)
            fields = cast("dict[str, Any]", _helpers.decode_dict(doc.fields, self.client))
            before = self.docs.get(path, {})
            mask = list(write.update_mask.field_paths) if "update_mask" in write else None
            after: dict[str, Any] = dict(before)
            if mask is None:
                after = dict(fields)
            else:
                for name in mask:
                    top = name.split(".")[0].strip("`")
                    if top in fields:
                        after[top] = fields[top]
                    else:
                        after.pop(top, None)
            self.docs[path] = after
            self.writes.append(Write(now, path, False, cause))
            self._index(now, path, before, after, cause)

    def _index(
        self, now: float, path: str, before: dict[str, Any], after: dict[str, Any], cause: str
    ) -> None:
        parent, _, rest = path.rpartition("/")
        parent, _, collection = parent.rpartition("/")
        del rest
        old = entries(self.declared, parent, collection, before) if before else {}
        for key, value in entries(self.declared, parent, collection, after).items():
            if key not in old or old[key] != value:
                self.inserts.append(Insert(now, key, value, path, cause))

    def _get(self, request: Any) -> None:
        self.reads.append(Read(time.time(), None, len(request.documents), CAUSE.get()))

    def _query(self, request: Any) -> None:
        self.reads.append(Read(time.time(), _shape(request.structured_query), 0, CAUSE.get()))

    def _aggregation(self, request: Any) -> None:
        query = request.structured_aggregation_query.structured_query
        self.reads.append(Read(time.time(), _shape(query), 0, CAUSE.get()))

    # -- Cloud Tasks ------------------------------------------------------------------------

    def watch_tasks(self, client: Any) -> None:
        """Wrap a ``CloudTasksClient``'s ``create_task``."""
        create = client.create_task

        def recorded(*args: Any, **kwargs: Any) -> Any:
            task = kwargs["task"]
            result = create(*args, **kwargs)
            body = json.loads(task.http_request.body)
            if "job" in body:
                job = body["job"]
                kind, key = f"job:{job['kind']}", f"{job['kind']}:{job['key']}"
            else:
                kind, key = "execute", str(body["executionPackage"].get("dispatch_id"))
            queue = str(kwargs["parent"]).rsplit("/", 1)[-1]
            self.tasks.append(Task(time.time(), queue, task.name, kind, key, CAUSE.get()))
            return result

        client.create_task = recorded


def _short(name: str) -> str:
    """A document's path under its database (``executions/e1/events/0000000002``)."""
    return name.split("/documents/", 1)[1]


def _shape(q: Any) -> Query:
    collection = q.from_[0].collection_id
    group = bool(q.from_[0].all_descendants)
    filters: list[tuple[str, str]] = []
    _filters(q.where, filters)
    orders = tuple(
        (o.field.field_path, "ASCENDING" if o.direction == 1 else "DESCENDING") for o in q.order_by
    )
    return Query(collection, group, tuple(filters), orders)


def _filters(f: Any, out: list[tuple[str, str]]) -> None:
    if "composite_filter" in f:
        for sub in f.composite_filter.filters:
            _filters(sub, out)
    elif "field_filter" in f:
        op = f.field_filter.op
        out.append((f.field_filter.field.field_path, str(getattr(op, "name", op))))
    elif "unary_filter" in f:
        out.append((f.unary_filter.field.field_path, "EQUAL"))
