"""``FirestoreInbox``: inboxes (:mod:`loom.store.inbox`) as documents under each execution.

An item is ``executions/{id}/inbox/{digest of its key}`` with ``key``, ``kind``, ``body``
(its JSON string), ``at`` and ``shard`` (the execution's). Posting is one ``create()`` of a
document of its own: posts to one execution never touch the same document (nor its log),
so a thousand children telling one parent are a thousand independent writes. Reading an
inbox is one query under the execution; the sweep finds inboxes left undrained with a
collection-group query on ``(shard, at)``, one shard at a time. The purge deletes an
execution's inbox with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1 import FieldFilter

from loom.ids import check_execution_id
from loom.shards import shard_of
from loom.store.inbox import Inbox, InboxItem
from loom_gcp._firestore_io import translate

WAKE_INTERVAL = 1.0  # the execution document's (and log's) one write a second


def item_id(key: str) -> str:
    """The document id of the item with ``key``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


class FirestoreInbox(Inbox):
    """See the module docstring and :class:`~loom.store.inbox.Inbox`."""

    wake_interval = WAKE_INTERVAL

    def __init__(self, client: firestore.AsyncClient, shards: Callable[[], Awaitable[int]]) -> None:
        self._client = client
        self._shards = shards

    def _box(self, execution_id: str) -> Any:
        execution = self._client.collection("executions").document(check_execution_id(execution_id))
        return cast(Any, execution).collection("inbox")

    async def post(self, execution_id: str, item: InboxItem) -> bool:
        """See :class:`~loom.store.inbox.Inbox` (one ``create()``: an existing item stays)."""
        fields = {
            "key": item.key,
            "kind": item.kind,
            "body": json.dumps(item.body, separators=(",", ":")),
            "at": item.at,
            "shard": shard_of(execution_id, await self._shards()),
        }
        try:
            await self._box(execution_id).document(item_id(item.key)).create(fields)
        except gexc.Conflict:
            return False
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "posting to an inbox") from exc
        return True

    async def items(self, execution_id: str, limit: int = 500) -> list[InboxItem]:
        """See :class:`~loom.store.inbox.Inbox`: ``limit`` items of the inbox, in order.

        Read in document-id order (digests: no index on ``at`` under each execution, whose
        inserts would come in bursts at its tail when a thousand children end at once)
        and sorted here; an inbox holding more than ``limit`` items gives some ``limit``
        of them, and the drain reads again until it is empty.
        """
        query = self._box(execution_id).limit(limit)
        try:
            docs = [d async for d in query.stream()]
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "reading an inbox") from exc
        found = [_item(d.to_dict() or {}) for d in docs]
        return sorted(found, key=lambda i: (i.at, i.key))

    async def remove(self, execution_id: str, keys: list[str]) -> None:
        """See :class:`~loom.store.inbox.Inbox` (deletes of 500 a commit)."""
        box = self._box(execution_id)
        try:
            for start in range(0, len(keys), 500):
                batch = self._client.batch()
                for key in keys[start : start + 500]:
                    batch.delete(box.document(item_id(key)))
                await batch.commit()
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "emptying an inbox") from exc

    async def stranded(self, before: float, shard: int, shards: int, limit: int = 500) -> list[str]:
        """See :class:`~loom.store.inbox.Inbox`: the collection group ``inbox`` by
        ``(shard, at)`` (an index Terraform declares)."""
        query = (
            self._client.collection_group("inbox")
            .where(filter=FieldFilter("shard", "==", shard))
            .where(filter=FieldFilter("at", "<", before))
            .order_by("at")
            .select([])
            .limit(limit)
        )
        try:
            docs = [d async for d in query.stream()]
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "reading inboxes") from exc
        parents = {cast(str, d.reference.parent.parent.id) for d in docs}
        return sorted(parents)


def _item(fields: dict[str, Any]) -> InboxItem:
    body: dict[str, Any] = json.loads(str(fields.get("body") or "{}"))
    return InboxItem(str(fields["key"]), str(fields["kind"]), body, float(fields["at"]))
