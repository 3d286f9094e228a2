"""An operator's listing on Firestore: a search by id prefix, and counts per status by
aggregation (the filtered listing fans out over shards: ``loom_gcp._firestore_shards``).

One ``COUNT`` aggregation per status, served by the automatic single-field index on
``status`` (with a flow, Firestore merges the single-field indexes on ``flow`` and
``status``, no composite index needed): Firestore bills
one read per 1,000 index entries counted, instead of one per document a scan would read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from google.cloud.firestore_v1 import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

from loom.store.base import ExecutionSummary, page_after
from loom.store.browse import BrowseQuery
from loom_gcp._firestore_docs import SUMMARY_FIELDS, summary_from_fields
from loom_gcp._firestore_io import CountedDocs

_PREFIX_PAGE = 500


async def _count(io: CountedDocs, query: Any) -> int:
    aggregation = query.count(alias="n")

    async def attempt(timeout: float) -> int:
        result = await aggregation.get(retry=None, timeout=timeout)
        return int(result[0][0].value)

    n = await io.rpc(attempt)
    io.ops["reads"] += 1 + n // 1000
    return n


async def count_by_status(
    io: CountedDocs, executions: Any, statuses: Sequence[str], flow: str | None
) -> dict[str, int]:
    """How many execution documents (of ``flow``, if given) have each status."""

    def query(status: str) -> Any:
        q = executions.where(filter=FieldFilter("status", "==", status))
        return q.where(filter=FieldFilter("flow", "==", flow)) if flow is not None else q

    async with io.call("count"):
        counts = await asyncio.gather(*(_count(io, query(s)) for s in statuses))
    return dict(zip(statuses, counts, strict=True))


async def browse_prefix(
    io: CountedDocs, executions: Any, query: BrowseQuery
) -> list[ExecutionSummary]:
    """A search by id prefix: the ids that start with it, in id order from the prefix on
    (reads what matches, not the collection), filtered, then ordered newest first."""
    prefix = query.id_prefix or ""
    if "/" in prefix:  # no execution id holds a slash
        return []
    matches: list[ExecutionSummary] = []
    start: Any = executions.document(prefix)
    first = True
    while True:
        q = executions.order_by(FieldPath.document_id())
        q = (
            q.start_at({FieldPath.document_id(): start})
            if first
            else q.start_after({FieldPath.document_id(): start})
        )
        async with io.call("browse"):
            docs = await io.query(q.select(SUMMARY_FIELDS).limit(_PREFIX_PAGE))
        inside = [d for d in docs if d.id.startswith(prefix)]
        matches.extend(summary_from_fields(d.id, d.to_dict() or {}) for d in inside)
        if len(inside) < len(docs) or len(docs) < _PREFIX_PAGE:
            break
        start, first = docs[-1].reference, False
    return page_after([r for r in matches if query.matches(r)], query.after, False, query.limit)
