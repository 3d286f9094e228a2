"""Document shapes of the Firestore queue leases: pure, no I/O (see
:mod:`loom_gcp.firestore_leases` for the protocol).

* **Shard document** ``loom_queues/{queue}/shards/{k}``: the shard's leases and grants as
  the admitter last settled them, ``{"leases": {hid: {"h", "p", "e", "g"}}, "grants":
  [times]}``. Only transactions that grant (``admit``, ``acquire``) write it.
* **Holder document** ``loom_queues/{queue}/leases/{hid}``: the one lease of a holder,
  ``{"h", "p", "o", "e", "g", "k"}`` (holder, partition, owner, expiry, grant id, shard).
  Renewals, takes and releases write only this document: the truth about a lease's owner
  and expiry. The shard document's copy of ``e`` may lag behind renewals; a settle reads
  the holder document of every entry whose copy says it expired.
* **Freed marker** ``loom_queues/{queue}/shards/{k}/freed/{hid}-{g}``: written with the
  release of grant ``g`` (in the same transaction as the holder document's delete), so the
  next settle drops the entry without reading every holder document.
* **Queued document** ``loom_queues/{queue}/shards/{k}/queued/{hid}``: a waiting holder,
  ``{"h", "p", "since", "flow"}``, created once (a holder already waiting keeps its place).

``hid`` is a digest of the holder (an execution id), so any id makes a valid document id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast


def hid(holder: str) -> str:
    """The document id of a holder's documents."""
    return hashlib.sha256(holder.encode("utf-8")).hexdigest()[:40]


def marker_id(holder: str, grant: str) -> str:
    """The document id of the freed marker of ``holder``'s grant ``grant``."""
    return f"{hid(holder)}-{grant}"


@dataclass
class ShardState:
    """A shard document being settled and granted from, inside one transaction.

    Attributes:
        leases: ``hid`` → entry (``h``, ``p``, ``e``, ``g``).
        grants: Times of the grants inside the rate window.
        changed: Whether the document must be written back.
    """

    leases: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    grants: list[float] = field(default_factory=list[float])
    changed: bool = False

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> ShardState:
        """The state a shard document holds (empty for a missing one)."""
        leases = cast("dict[str, dict[str, Any]]", dict(data.get("leases") or {}))
        grants = [float(t) for t in cast("list[Any]", data.get("grants") or [])]
        return cls({k: dict(v) for k, v in leases.items()}, grants)

    def fields(self, now: float, window: float) -> dict[str, Any]:
        """The document to write: the leases, the grants still inside the rate window."""
        return {"leases": self.leases, "grants": [t for t in self.grants if t > now - window]}

    def expired(self, now: float) -> list[str]:
        """Holders whose entry says the lease expired (their holder document decides)."""
        return [str(v["h"]) for v in self.leases.values() if float(v["e"]) <= now]

    def settle(
        self, freed: Mapping[str, str], holders: Mapping[str, Mapping[str, Any] | None], now: float
    ) -> list[str]:
        """Drop the entries released (a freed marker names their grant) or lapsed (their
        holder document is gone, belongs to another grant, or expired); bring forward the
        expiry of entries renewed since. Returns the holders whose documents lapsed (to
        delete).

        Args:
            freed: ``hid`` → grant id of the freed markers read.
            holders: ``hid`` → holder document (``None``: missing) of the entries that
                say they expired.
            now: The caller's clock.
        """
        lapsed: list[str] = []
        for key, entry in list(self.leases.items()):
            if freed.get(key) == entry.get("g"):
                del self.leases[key]
                self.changed = True
                continue
            if float(entry["e"]) > now or key not in holders:
                continue
            doc = holders[key]
            if doc is not None and doc.get("g") == entry.get("g") and float(doc["e"]) > now:
                entry["e"] = float(doc["e"])
            else:
                del self.leases[key]
                if doc is not None and doc.get("g") == entry.get("g"):
                    lapsed.append(str(entry["h"]))
            self.changed = True
        return lapsed

    def live(self) -> dict[str, str | None]:
        """Holder → partition of the entries (after :meth:`settle`: the live leases)."""
        return {str(v["h"]): v.get("p") for v in self.leases.values()}

    def hold(self, holder: str, partition: str | None, expires: float, grant: str) -> None:
        """Record a lease granted now."""
        self.leases[hid(holder)] = {"h": holder, "p": partition, "e": expires, "g": grant}
        self.changed = True


def holder_fields(
    holder: str, partition: str | None, owner: str, expires: float, grant: str, shard: int
) -> dict[str, Any]:
    """A holder document."""
    return {"h": holder, "p": partition, "o": owner, "e": expires, "g": grant, "k": shard}


def is_live(doc: Mapping[str, Any] | None, now: float) -> bool:
    """Whether a holder document is a lease live at ``now``."""
    return doc is not None and float(doc.get("e") or 0.0) > now
