"""Firestore's indexes as Terraform declares them: which index serves a query, and which
index entries a write inserts (the load model's view of the database).

Read from ``terraform/modules/loom`` offline (``tests.deploy.terraform_model``):

* composite indexes (``google_firestore_index``: collection id, scope, fields in order);
* single-field exemptions (``google_firestore_field`` with an empty ``index_config``):
  every other field of every document has Firestore's automatic single-field indexes
  (collection scope, ascending and descending).

A query is *backed* (:func:`backing_index`) when Firestore could run it on those indexes
alone, by the rules Firestore documents:

* equality filters only (``==``, ``in``), ordered by the document id or not at all: the
  single-field indexes of the filtered fields (merged), collection scope only;
* one field filtered by a range or ordered, and nothing else: its single-field index;
* otherwise a composite index of the query's scope whose first fields are exactly the
  equality fields (in any order) and whose next fields are the ordered fields, in order,
  with the directions of the query or all reversed (a range field must be ordered first).

The emulator enforces none of this; this module is what checks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.deploy import terraform_model as tm

EQUALITY = frozenset({"EQUAL", "IN"})
NAME = "__name__"


@dataclass(frozen=True, slots=True)
class Index:
    """One composite index, or a field's single-field index (``fields`` of one)."""

    name: str
    collection: str
    fields: tuple[tuple[str, str], ...]
    group: bool = False  # collection-group scope

    @property
    def leads_with_shard(self) -> bool:
        return self.fields[0][0] == "shard"


@dataclass(frozen=True, slots=True)
class Query:
    """A query as the store sent it (from its ``StructuredQuery``)."""

    collection: str
    group: bool
    filters: tuple[tuple[str, str], ...]  # (field, operator)
    orders: tuple[tuple[str, str], ...]  # (field, ASCENDING | DESCENDING)

    def shape(self) -> str:
        """A readable form, for reports."""
        where = " and ".join(f"{f} {op}" for f, op in self.filters) or "-"
        order = ", ".join(f"{f} {d[:3].lower()}" for f, d in self.orders) or "-"
        scope = "group " if self.group else ""
        return f"{scope}{self.collection} where {where} order by {order}"


@dataclass
class Declared:
    """Every index and exemption the Terraform module declares."""

    composites: list[Index] = field(default_factory=list[Index])
    exempt: set[tuple[str, str]] = field(default_factory=set[tuple[str, str]])

    @classmethod
    def load(cls) -> Declared:
        """Read the module under ``terraform/modules/loom``."""
        model = tm.load_dir(tm.MODULE_DIR)
        composites = [
            Index(
                name,
                str(body.get("collection")),
                tuple(
                    (str(f.get("field_path")), str(f.get("order")))
                    for f in tm.blocks(body, "fields")
                ),
                body.get("query_scope") == "COLLECTION_GROUP",
            )
            for name, body in model.of_type("google_firestore_index").items()
        ]
        return cls(composites, tm.unindexed_fields(model))

    def single(self, collection: str, name: str) -> bool:
        """Whether ``collection``'s field ``name`` keeps its single-field indexes."""
        return (collection, name) not in self.exempt


def backing_index(query: Query, declared: Declared) -> str | None:
    """The name of the index that serves ``query`` (see the module docstring), if any."""
    eq = {f for f, op in query.filters if op in EQUALITY}
    ranged = {f for f, op in query.filters if op not in EQUALITY}
    orders = [(f, d) for f, d in query.orders if f != NAME]
    ordered = [f for f, _ in orders]
    if ranged and (not ordered or ordered[0] not in ranged):
        orders = [(next(iter(ranged)), "ASCENDING"), *orders]
        ordered = [f for f, _ in orders]
    if len(ranged) > 1:
        return None
    if not orders:
        if query.group and eq:
            return _composite(query, declared, eq, [])
        if all(declared.single(query.collection, f) for f in eq):
            return "single-field: " + (", ".join(sorted(eq)) or "(none)")
        return None
    if not eq and len(orders) == 1 and not query.group:
        name = orders[0][0]
        return f"single-field: {name}" if declared.single(query.collection, name) else None
    return _composite(query, declared, eq, orders)


def _composite(
    query: Query, declared: Declared, eq: set[str], orders: list[tuple[str, str]]
) -> str | None:
    for index in declared.composites:
        if index.collection != query.collection or index.group != query.group:
            continue
        head, tail = index.fields[: len(eq)], list(index.fields[len(eq) :])
        if {f for f, _ in head} != eq or len(tail) != len(orders):
            continue
        if [f for f, _ in tail] != [f for f, _ in orders]:
            continue
        same = all(d == o for (_, d), (_, o) in zip(tail, orders, strict=True))
        flipped = all(d != o for (_, d), (_, o) in zip(tail, orders, strict=True))
        if same or flipped:
            return index.name
    return None


def entries(
    declared: Declared, parent: str, collection: str, doc: Mapping[str, Any]
) -> dict[tuple[str, ...], Any]:
    """The index entries a document with fields ``doc`` holds, in the collection
    ``collection`` under ``parent`` (``""``: the database root): range → the entry's
    ordering value. The *range* of an entry is its index (per parent for a collection-scope
    index) with the values of its leading fields (a composite's every field but the last;
    nothing more for a single-field index): where inserts of a monotonic value pile up.
    """
    found: dict[tuple[str, ...], Any] = {}
    where = f"{parent}/{collection}" if parent else collection
    for index in declared.composites:
        if index.collection != collection or not all(f in doc for f, _ in index.fields):
            continue
        values = [_comparable(doc[f]) for f, _ in index.fields]
        prefix = tuple(f"{f}={v!r}" for (f, _), v in zip(index.fields[:-1], values, strict=False))
        scope = index.collection if index.group else where
        found[(f"composite:{index.name}", scope, *prefix)] = values[-1]
    for name, value in doc.items():
        if declared.single(collection, name) and not isinstance(value, dict | list):
            found[(f"single:{collection}.{name}", where)] = _comparable(value)
    return found


def _comparable(value: Any) -> Any:
    timestamp = getattr(value, "timestamp", None)
    return timestamp() if callable(timestamp) else value
