"""A worker's local first look before the shared dupefilter: the fingerprints it knows are queued."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_frontier.dupefilter import fingerprint_int64

if TYPE_CHECKING:
    from collections.abc import Iterable


class SeenCache:
    """Fingerprints (their first 64 bits, as the packed dupefilter keeps them) that this worker
    has queued, or has learnt from the seen feed that another worker queued. A link found here is
    a duplicate for sure: it costs no serialization and no dedup check in Redis. A link not found
    here goes to the shared dupefilter, which decides. Bounded: at ``capacity`` fingerprints the
    cache is emptied (0: the cache is off, every link goes to Redis)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._seen: set[int] = set()
        self._forgets: bytes | None = None

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, key: int) -> bool:
        return key in self._seen

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def add(self, key: int) -> None:
        """Remember ``key`` (:func:`~scrapy_frontier.dupefilter.fingerprint_int64`)."""
        if not self.capacity:
            return
        if len(self._seen) >= self.capacity:
            self._seen.clear()
        self._seen.add(key)

    def learn(self, fed: Iterable[bytes], packed: bool) -> int:
        """Add what other workers queued: the seen feed's entries, each a comma-separated list of
        fingerprints, as decimal 64-bit integers (``packed`` dupefilter layout) or as hex digests.
        Returns how many fingerprints were read."""
        if not self.capacity:
            return 0
        seen = self._seen
        learnt = 0
        for blob in fed:
            for item in blob.split(b","):
                if len(seen) >= self.capacity:
                    seen.clear()
                seen.add(int(item) if packed else fingerprint_int64(bytes.fromhex(item[:16].decode())))
                learnt += 1
        return learnt

    def clear(self) -> None:
        """Forget everything: after a Redis error (the last writes may be lost) or a ``scrapy forget``."""
        self._seen.clear()

    def forgets_seen(self, forgets: bytes | None) -> bool:
        """Note the count of ``scrapy forget`` calls the heartbeat last read; when it changed
        since the last note, empty the cache (forgotten URLs must be checked in Redis again) and
        return True."""
        changed = self._forgets is not None and forgets != self._forgets and bool(self._seen)
        self._forgets = forgets
        if changed:
            self._seen.clear()
        return changed
