"""The shared dupefilter: which requests the crawl has already queued, checked and updated in the
same Lua call that queues new requests (:mod:`scrapy_frontier.frontier`).

Three layouts of ``<spider>:dupefilter`` (setting ``DUPEFILTER_MODE``):

- ``exact`` (default): a set of hex fingerprints, as scrapy-redis's ``RFPDupeFilter`` writes
  it, so a scrapy-redis crawl's dupefilter carries over. About 90 bytes of Redis memory per URL.
- ``exact`` with ``DUPEFILTER_RECRAWL_AGE`` (seconds): a sorted set, score = when the
  fingerprint was last queued (Unix ms); a request seen longer ago than the age is queued again.
- ``bloom``: a scalable Bloom filter (Almeida et al., "Scalable Bloom Filters", 2007): filter
  ``i`` holds ``DUPEFILTER_BLOOM_CAPACITY * 2**i`` fingerprints at a false-positive rate of
  ``DUPEFILTER_BLOOM_ERROR_RATE / 2**(i+1)``, so the whole chain stays under the configured rate
  however far it grows. Bits live in ``<spider>:dupefilter:bloom:<i>:<segment>`` (strings of
  4 MB, each filling one jemalloc size class; a filter has at most 2**42 bits), the layout and counts in the hash
  ``<spider>:dupefilter:bloom``. The ``k`` bit positions come from two 52-bit parts of the
  fingerprint by enhanced double hashing (Dillinger and Manolios, 2004). About 3.8 bytes per URL
  at 1e-6 when a filter is full. A Bloom filter cannot delete: forgotten fingerprints go to
  ``<spider>:dupefilter:forgotten`` and are let through once.

The check is the Lua file ``scrapy_frontier/lua/lib/dupefilter_seen.lua``, included by the
frontier's push script and by this module's ``dupefilter_add.lua``.

The hash ``<spider>:dupefilter:meta`` records who wrote the dupefilter: the fingerprinter class,
the fingerprint it gives a fixed probe request, and the layout. A worker whose fingerprinter or
layout differs refuses to start (:class:`DupefilterMismatch`), instead of silently crawling the
whole site again (rmax/scrapy-redis#272).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from scrapy import Request

from scrapy_frontier.connection import text
from scrapy_frontier.scripts import source

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis as AsyncRedis
    from redis.client import Redis

    from scrapy_frontier.keys import Keys

MODES = ("exact", "set", "bloom")
#: Fingerprints a packed bucket holds on average at DUPEFILTER_CAPACITY: half the 512 members up
#: to which Redis keeps a set of integers as a compact intset (set-max-intset-entries), 8 bytes
#: each, so that hardly any bucket leaves it before the capacity is passed twice over.
BUCKET_FINGERPRINTS = 256
#: Bits per Redis string holding part of a Bloom filter: 4 MB less 64 bytes, so that a segment
#: and its header fill one jemalloc size class (a 37.7 MB string would take a 40 MB one).
SEGMENT_BITS = (4 * 1024 * 1024 - 64) * 8
#: The request whose fingerprint identifies a fingerprinter's algorithm in the meta hash.
PROBE = Request("http://fingerprint.probe/path?b=2&a=1#frag", method="POST", body=b"probe", headers={"X-Probe": "1"})


class DupefilterMismatch(Exception):
    """The dupefilter in Redis was written with another fingerprinter or layout."""


def fingerprint_int64(digest: bytes) -> int:
    """The first 64 bits of a fingerprint's bytes as a signed integer: the packed layout's member,
    and what a worker's local first look keeps of a fingerprint."""
    return int.from_bytes(digest[:8], "big", signed=True)


def start_fingerprint(digest: bytes) -> bytes:
    """The fingerprint a ``dont_filter`` start request is deduplicated under: the SHA-1 of
    ``b"start:"`` and its request fingerprint ``digest`` (20 bytes, as Scrapy's). Start requests
    are fetched once per crawl however many workers yield them, and a link to the same page is
    not filtered by them, as in plain Scrapy, where a ``dont_filter`` request never enters the
    dupefilter."""
    return hashlib.sha1(b"start:" + digest).digest()


@dataclass(frozen=True)
class DedupConfig:
    """How this worker dedups: ``mode`` is ``exact`` or ``bloom``; ``recrawl_age`` in seconds
    (0: never; exact mode only); ``capacity`` (fingerprints) and ``error_rate`` (0-1) size the
    first Bloom filter."""

    mode: str = "exact"
    recrawl_age: float = 0.0
    capacity: int = 10_000_000
    error_rate: float = 1e-6
    #: The exact layout: ``packed`` (new crawls) or ``set`` (``DUPEFILTER_MODE=set``, or a
    #: scrapy-redis crawl's hex set found in Redis).
    exact_layout: str = "packed"
    #: Packed layout: buckets of the whole crawl (recorded with it), from ``DUPEFILTER_CAPACITY``.
    buckets: int = -(-10_000_000 // BUCKET_FINGERPRINTS)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"DUPEFILTER_MODE={self.mode!r}: must be one of {', '.join(MODES)}")
        if self.recrawl_age and self.mode == "bloom":
            raise ValueError(
                "DUPEFILTER_RECRAWL_AGE needs DUPEFILTER_MODE=exact: a Bloom filter does not remember when it saw a URL"
            )
        if not 1 <= self.buckets <= 2**32:
            raise ValueError(f"DUPEFILTER_CAPACITY={self.buckets * BUCKET_FINGERPRINTS!r}: must be between 1 and 2**40")
        if not 0 <= self.recrawl_age < 10**12:  # also refuses inf and nan
            raise ValueError(f"DUPEFILTER_RECRAWL_AGE={self.recrawl_age!r}: must be a number of seconds >= 0")
        if not 1 <= self.capacity <= 2**40:
            raise ValueError(f"DUPEFILTER_BLOOM_CAPACITY={self.capacity!r}: must be between 1 and 2**40")
        if not 0 < self.error_rate < 1:
            raise ValueError(f"DUPEFILTER_BLOOM_ERROR_RATE={self.error_rate!r}: must be between 0 and 1")

    @property
    def layout(self) -> str:
        """``packed``, ``set``, ``zset`` or ``bloom``: the Redis layout of the dupefilter."""
        if self.mode == "bloom":
            return "bloom"
        if self.recrawl_age:
            return "zset"
        return "set" if self.mode == "set" else self.exact_layout

    def packed_member(self, fingerprint: str, shards: int = 1) -> str:
        """The packed layout's entry for hex ``fingerprint``: ``<member>@<bucket>``, the member
        its first 64 bits as a signed decimal integer (Redis keeps it in an intset, 8 bytes),
        the bucket (within a shard of ``shards``) from the next 32 bits."""
        bucket, member = self.packed_bucket(fingerprint, shards)
        return f"{member}@{bucket}"

    def packed_bucket(self, fingerprint: str, shards: int = 1) -> tuple[int, int]:
        """(bucket, member) of hex ``fingerprint`` in the packed layout (:meth:`packed_member`);
        the bucket's key is ``<dupefilter>:<bucket>``."""
        member = fingerprint_int64(bytes.fromhex(fingerprint[:16]))
        per_shard = max(1, -(-self.buckets // max(1, shards)))
        return int(fingerprint[16:24], 16) % per_shard, member

    def per_shard(self, shards: int) -> DedupConfig:
        """The config of one of ``shards`` dupefilter shards: each first Bloom filter sized for
        its share of ``capacity``."""
        if shards <= 1:
            return self
        return replace(self, capacity=max(1, -(-self.capacity // shards)))

    def lua_args(self, now: int) -> list[Any]:
        """The values of the dedup check's locals (``lua/lib/dupefilter_seen.lua``), in order:
        ``MODE`` (layout), ``NOW`` (Unix ms), ``AGE`` (ms), ``CAP0``, ``ERR``."""
        return [self.layout, now, int(self.recrawl_age * 1000), self.capacity, repr(self.error_rate)]

    @classmethod
    def from_settings(cls, settings: Any) -> DedupConfig:
        """Read ``DUPEFILTER_MODE``, ``DUPEFILTER_RECRAWL_AGE``, ``DUPEFILTER_BLOOM_CAPACITY``,
        ``DUPEFILTER_BLOOM_ERROR_RATE`` (:func:`scrapy_frontier.config.read_value`). Raises
        ValueError naming the setting that is wrong."""
        from scrapy_frontier.config import read_value

        try:  # an int that may be written 1e7
            capacity = read_value(settings, "DUPEFILTER_BLOOM_CAPACITY")
            if not math.isfinite(capacity):
                raise ValueError
        except ValueError:
            raise ValueError(
                f"Setting DUPEFILTER_BLOOM_CAPACITY={settings.get('DUPEFILTER_BLOOM_CAPACITY')!r} is not a valid int"
            ) from None
        try:
            exact_capacity = read_value(settings, "DUPEFILTER_CAPACITY")
            if not math.isfinite(exact_capacity) or not 1 <= exact_capacity <= 2**40:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"Setting DUPEFILTER_CAPACITY={settings.get('DUPEFILTER_CAPACITY')!r} is not an int between 1 and 2**40"
            ) from None
        return cls(
            mode=read_value(settings, "DUPEFILTER_MODE").lower(),
            recrawl_age=read_value(settings, "DUPEFILTER_RECRAWL_AGE"),
            capacity=int(capacity),
            error_rate=read_value(settings, "DUPEFILTER_BLOOM_ERROR_RATE"),
            buckets=max(1, -(-int(exact_capacity) // BUCKET_FINGERPRINTS)),
        )

    def for_stored(self, meta: dict[str, str]) -> DedupConfig:
        """This config as the crawl recorded it (``<spider>:dupefilter:meta``): a ``set`` layout
        found where ``exact`` would make a packed one, the recorded bucket count."""
        layout = meta.get("layout")
        config = self
        if self.mode == "exact" and not self.recrawl_age and layout in ("set", "packed"):
            config = replace(config, exact_layout=layout)
        if meta.get("buckets"):
            config = replace(config, buckets=int(meta["buckets"]))
        return config

    @classmethod
    def for_layout(cls, layout: str) -> DedupConfig:
        """A config that reads and writes a dupefilter found in Redis with ``layout`` (``set``,
        ``zset`` or ``bloom``, as :func:`stored_layout` gives it): for commands that act on an
        existing crawl's dupefilter. A ``zset``'s recrawl age does not matter to them."""
        if layout == "bloom":
            return cls(mode="bloom")
        if layout == "packed":
            return cls(mode="exact", exact_layout="packed")
        return cls(mode="exact", recrawl_age=1.0 if layout == "zset" else 0.0, exact_layout="set")


def bloom_size(capacity: int, error_rate: float) -> tuple[int, int]:
    """``(bits, hashes)`` of a Bloom filter holding ``capacity`` items at ``error_rate``
    (m = -n ln p / (ln 2)^2, k = ceil(log2(1/p))), as ``lua/lib/dupefilter_seen.lua`` computes them."""
    k = math.ceil(-math.log(error_rate) / math.log(2))
    return math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2), k


def fingerprinter_id(fingerprinter: Any) -> tuple[str, str]:
    """``(class path, hex fingerprint of PROBE)``: what the meta hash records. A fingerprinter
    standing for another library's records that one's name (``recorded_name``)."""
    cls = type(fingerprinter)
    name = getattr(fingerprinter, "recorded_name", None) or f"{cls.__module__}.{cls.__qualname__}"
    return name, fingerprinter.fingerprint(PROBE).hex()


def meta_for(config: DedupConfig, fingerprinter: Any) -> dict[str, str]:
    name, probe = fingerprinter_id(fingerprinter)
    meta = {"fingerprinter": name, "probe": probe, "layout": config.layout}
    if config.layout == "packed":
        meta["buckets"] = str(config.buckets)
    return meta


def check_meta(stored: dict[str, str], wanted: dict[str, str], key: str) -> None:
    """Raise :class:`DupefilterMismatch` with what differs and what to do about it."""
    if stored.get("probe", wanted["probe"]) != wanted["probe"]:
        raise DupefilterMismatch(
            f"The dupefilter {key} was written by fingerprinter {stored.get('fingerprinter')} "
            f"(probe fingerprint {stored['probe'][:12]}...), but this worker's {wanted['fingerprinter']} gives "
            f"{wanted['probe'][:12]}...: every URL would look new and the whole crawl would be fetched again. "
            "Use the same REQUEST_FINGERPRINTER_CLASS (and Scrapy version) as the workers that wrote it, "
            "or start over with another SCHEDULER_DUPEFILTER_KEY."
        )
    exact = wanted["layout"] == "packed" and stored.get("layout") in ("set", "packed")  # exact either way
    if stored.get("layout", wanted["layout"]) != wanted["layout"] and not exact:
        raise DupefilterMismatch(
            f"The dupefilter {key} is in layout {stored['layout']!r}, but this worker is set for {wanted['layout']!r} "
            "(DUPEFILTER_MODE / DUPEFILTER_RECRAWL_AGE): use the settings the crawl started with, "
            "or start over with another SCHEDULER_DUPEFILTER_KEY."
        )


_LAYOUT_OF_TYPE = {b"set": "set", b"zset": "zset"}


async def claim(redis: AsyncRedis, keys: Keys, config: DedupConfig, fingerprinter: Any) -> bool:
    """Record this worker's fingerprinter and layout in ``<spider>:dupefilter:meta`` if nobody
    has (returns True), else check them against what is there. A dupefilter written before the
    meta existed (by scrapy-redis, say) is adopted if its Redis type matches the layout.
    Raises :class:`DupefilterMismatch`."""
    wanted = meta_for(config, fingerprinter)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.dupefilter_meta)
        pipe.type(keys.dupefilter)
        pipe.exists(keys.bloom)
        stored_raw, kind, bloom = await pipe.execute()
    stored = {k.decode(): v.decode() for k, v in stored_raw.items()}
    if not stored:
        if kind in _LAYOUT_OF_TYPE:
            stored = {"layout": _LAYOUT_OF_TYPE[kind]}
        elif bloom:
            stored = {"layout": "bloom"}
    check_meta(stored, wanted, keys.dupefilter)
    if "probe" in stored:
        return False
    if wanted["layout"] == "packed" and stored.get("layout") == "set":
        # an exact crawl finds a hex set (scrapy-redis's, say): it keeps that layout
        wanted = {k: v for k, v in wanted.items() if k != "buckets"} | {"layout": "set"}
    # HSETNX on the probe: two workers starting together cannot both write different metas.
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hsetnx(keys.dupefilter_meta, "probe", wanted["probe"])
        pipe.hsetnx(keys.dupefilter_meta, "fingerprinter", wanted["fingerprinter"])
        pipe.hsetnx(keys.dupefilter_meta, "layout", wanted["layout"])
        if "buckets" in wanted:
            pipe.hsetnx(keys.dupefilter_meta, "buckets", wanted["buckets"])
        # the queues' format (lua/lib/frontier_queue.lua): a crawl without it is refused at join
        pipe.hsetnx(keys.dupefilter_meta, "ranked", 1)
        pipe.hgetall(keys.dupefilter_meta)
        *_, now_raw = await pipe.execute()
    check_meta({k.decode(): v.decode() for k, v in now_raw.items()}, wanted, keys.dupefilter)
    return True


#: Shards of a new crawl on a Redis Cluster when ``FRONTIER_SHARDS`` is not set: enough to
#: spread the hosts over a few masters evenly, few enough that a worker visits them all often.
CLUSTER_SHARDS = 16


async def record_shards(redis: AsyncRedis, keys: Keys, wanted: int) -> int:
    """The crawl's frontier shard count, recorded in ``<spider>:dupefilter:meta`` (field
    ``shards``) by the first worker so every worker agrees: ``wanted`` for a new crawl, 0 for a
    crawl whose unsharded keys already exist (started before sharding, or by scrapy-redis).
    HSETNX: two workers starting together agree. Returns the recorded count."""
    stored = await redis.hget(keys.dupefilter_meta, "shards")
    if stored is None:
        async with redis.pipeline(transaction=False) as pipe:
            for key in (keys.dupefilter, keys.queue, keys.bloom):
                pipe.exists(key)
            legacy = any(await pipe.execute())
        await redis.hsetnx(keys.dupefilter_meta, "shards", 0 if legacy else wanted)
        stored = await redis.hget(keys.dupefilter_meta, "shards")
    return int(text(stored or b"0"))


class Dupefilter:
    """Check-and-add and forget on the shared dupefilter, outside the frontier's push (for the
    ``forget`` command, benchmarks and tests). Works with a sync or an asyncio client: methods
    return what the client's script call returns (await it with an asyncio client)."""

    def __init__(self, redis: Redis | AsyncRedis, keys: Keys, config: DedupConfig) -> None:
        self.keys = keys
        self.config = config
        self._dedup = redis.register_script(source("dupefilter_add", SEGMENT_BITS=SEGMENT_BITS))
        self._forget = redis.register_script(source("dupefilter_forget"))

    def add(self, fingerprints: Sequence[str], now: int = 0, shard: int = 0) -> Any:
        """Check and record hex ``fingerprints`` in dupefilter ``shard``: a list of 1 (new) / 0
        (seen), in order. ``now`` (Unix ms) stands for the server's time when given (tests)."""
        sh = self.keys.shard(shard)
        config = self.config.per_shard(max(1, self.keys.shards))
        fingerprints = self._members(fingerprints)
        return self._dedup(
            keys=[sh.dupefilter, sh.forgotten, sh.bloom],
            args=[*config.lua_args(now), sh.bloom_bits_prefix, *fingerprints],
        )

    def _members(self, fingerprints: Sequence[str]) -> Sequence[str]:
        if self.config.layout != "packed":
            return fingerprints
        return [self.config.packed_member(fp, max(1, self.keys.shards)) for fp in fingerprints]

    def forget(self, fingerprints: Sequence[str], shard: int = 0) -> Any:
        """Let these fingerprints through dupefilter ``shard`` once more (a URL's shard is its
        host's: :meth:`Keys.shard_of <scrapy_frontier.keys.Keys.shard_of>`). Returns how many the
        exact layouts knew (a Bloom filter cannot tell: every one counts)."""
        sh = self.keys.shard(shard)
        return self._forget(keys=[sh.dupefilter, sh.forgotten], args=[self.config.layout, *self._members(fingerprints)])


def stored_layout(sync: Redis, keys: Keys) -> str | None:
    """The layout recorded for a crawl's dupefilter, or guessed from the key types; None if empty."""
    layout = sync.hget(keys.dupefilter_meta, "layout")
    if layout:
        return text(layout)
    kind = sync.type(keys.dupefilter)
    if kind in _LAYOUT_OF_TYPE:
        return _LAYOUT_OF_TYPE[kind]
    return "bloom" if sync.exists(keys.bloom) else None
