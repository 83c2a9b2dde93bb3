"""Redis write-through cache of items, keyed by their unique key (an item without a schema: by its
document key): by default only what the unchanged skip needs (a marker of the content last
committed; docs/sizing.md gives its size), with ``REDIS_CACHE_ITEMS`` the latest version of every
item."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.exceptions import NotConfigured

from scrapy_frontier.config import read_setting
from scrapy_frontier.connection import describe_error, optional_shared_redis
from scrapy_frontier.keys import hash_tag, keys_of
from scrapy_frontier.redis_health import redis_health
from scrapy_frontier.schema import content_hash_of, document_of, item_values, schema_of
from scrapy_frontier.scrapy_compat import pipeline_hook
from scrapy_frontier.scripts import source
from scrapy_frontier.signals import item_unchanged, items_stored
from scrapy_frontier.storage.backends import storage_target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


#: Most items one cache write carries (one script call; about 1 KB of JSON each).
BATCH_MAX = 200
#: Seconds the first item of a batch waits for others to join it (items of the same moment,
#: e.g. of one response or of responses parsed together, share one script call).
BATCH_WINDOW = 0.02

#: Lua scripts, ``scrapy_frontier/lua/cache_*.lua`` (KEYS and ARGV at the top of each file).
_PUT = source("cache_put")
_MARK_STORED = source("cache_mark_stored")
_CHECK = source("cache_check")
_MARK_LEAN = source("cache_mark_lean")
#: Items a lean cache bucket holds on average at REDIS_CACHE_CAPACITY: well under the 128
#: fields up to which Redis keeps a hash in its compact listpack encoding
#: (hash-max-listpack-entries), so that almost no bucket leaves it.
BUCKET_ITEMS = 64


def cache_key(prefix: str, unique_value: Any) -> str:
    """``<spider>:items:cache:<sha1 hex of the unique key's value>`` (an unsharded crawl)."""
    return prefix + hashlib.sha1(str(unique_value).encode()).hexdigest()


def lean_entry(keys: Any, unique_value: Any, buckets: int) -> tuple[str, bytes]:
    """(bucket key, field) of ``unique_value`` in the lean cache of ``buckets`` buckets: the
    SHA-1 of the value, its first 4 bytes pick the bucket, the next 10 are the field (a
    collision of two unique keys in one bucket has odds of 2**-80)."""
    digest = hashlib.sha1(str(unique_value).encode()).digest()
    return keys.item_cache_bucket(int.from_bytes(digest[:4], "big") % buckets), digest[4:14]


def stored_marker(store: str, content_hash: str) -> bytes:
    """8 bytes of the SHA-1 of ``<store id>:<content hash>``: what the lean cache keeps of an
    item committed to the database ``store``."""
    return hashlib.sha1(f"{store}:{content_hash}".encode()).digest()[:8]


def cache_key_of(keys: Any, unique_value: Any) -> str:
    """The cache key of ``unique_value`` in the crawl of ``keys`` (:meth:`Keys.item_cache
    <scrapy_frontier.keys.Keys.item_cache>`)."""
    return keys.item_cache(hashlib.sha1(str(unique_value).encode()).hexdigest())


def store_id(settings: Any) -> str:
    """Which database confirmed a stored hash: the first 12 hex digits of the SHA-1 of
    :func:`scrapy_frontier.storage.backends.storage_target`. A stored hash counts only for the database that
    confirmed it, so pointing a crawl at another database writes every item there."""
    return hashlib.sha1(storage_target(settings).encode()).hexdigest()[:12]


def _jsonable(value: Any) -> Any:
    """``default=`` of the item JSON: nested items as dicts (as ``ItemAdapter.asdict``), the rest as ``str``."""
    if ItemAdapter.is_item(value):
        return ItemAdapter(value).asdict()
    return str(value)


_to_json = json.JSONEncoder(ensure_ascii=False, default=_jsonable).encode


class RedisCachePipeline:
    """By default (``REDIS_CACHE_ITEMS`` off), the lean cache: of each item only a marker of the
    content last committed to the database, 8 bytes in a field of 10 bytes of one of
    ``REDIS_CACHE_CAPACITY / 64`` bucket hashes ``<spider>:items:cache:@<n>`` (Redis keeps them
    in its compact listpack encoding up to 128 fields; a bucket expires ``REDIS_CACHE_TTL``
    seconds after its last write): one read per batch (stat ``cache/checked``), one write per
    batch committed. The unchanged skip below works the same.

    With ``REDIS_CACHE_ITEMS``, write every item to ``<spider>:items:cache:<sha1(unique key)>``
    (an item without a schema: ``<sha1(item type NUL document key hash)>``, see
    :class:`~scrapy_frontier.schema.Document`), a hash of ``content_hash`` and ``item`` (JSON)
    that expires after ``REDIS_CACHE_TTL`` seconds; with ``REDIS_ITEMS_LIST`` also append it to
    ``<spider>:items`` (scrapy-redis's RedisPipeline). The content hash is the item's
    ``content_hash`` field when its schema has one, else the SHA-1 of its canonical JSON.

    Writes are batched: items arriving within :data:`BATCH_WINDOW` seconds of each other (or
    while the previous write is in flight) go to Redis in one script call of at most
    :data:`BATCH_MAX` items, one call at a time (stats ``cache/written``, ``cache/batches`` =
    script calls). ``process_item`` does not wait for the write: the item goes on to storage at
    once, and the storage pipeline waits, once per batch, for :meth:`settled`.

    When the item's ``content_hash`` equals the hash the storage pipeline last confirmed as
    committed to the same database (``stored_hash`` = ``<store_id>:<content hash>``, set on the
    ``items_stored`` signal, in one round trip per batch), the write's answer says so:
    ``item_unchanged`` is sent and the database write is skipped (stat ``cache/unchanged``): an
    item is never skipped because of a cache entry whose write did not reach the database. Needs
    ``REDIS_URL``; a Redis error never drops the item (stat ``cache/errors``, one per item not
    cached); an outage or a Redis out of memory is reported once for the worker
    (:mod:`scrapy_frontier.redis_health`).
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not read_setting(crawler, "REDIS_CACHE_ENABLED"):
            raise NotConfigured("REDIS_CACHE_ENABLED is off")
        if not settings.get("REDIS_URL"):
            raise NotConfigured  # embedded mode: nothing to cache in, nothing to warn about
        self.ttl = read_setting(crawler, "REDIS_CACHE_TTL")
        self.keep_items = read_setting(crawler, "REDIS_CACHE_ITEMS")
        self.buckets = max(1, read_setting(crawler, "REDIS_CACHE_CAPACITY") // BUCKET_ITEMS)
        self.push_list = read_setting(crawler, "REDIS_ITEMS_LIST")
        self.document_key = settings.get("STORAGE_DOCUMENT_KEY") or None
        self.crawler = crawler
        self.stats = crawler.stats
        self.store = store_id(settings)
        self.health = redis_health(crawler)
        self._failing = False
        self._marks_failing = False
        #: (cache key, field (lean) or None, content hash, item json or "", item), in arrival order.
        self._waiting: list[tuple[str, bytes | None, str, str, Any]] = []
        self._writer: asyncio.Future[None] | None = None
        #: Items passed to the writer so far, and those whose write has been answered (or failed).
        self._queued = 0
        self._answered = 0
        #: (items queued when asked, future) of each :meth:`settled` call waiting.
        self._settling: list[tuple[int, asyncio.Future[None]]] = []

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisCachePipeline:
        return cls(crawler)

    @pipeline_hook
    async def open_spider(self) -> None:
        self.keys = keys_of(self.crawler)
        self.redis = optional_shared_redis(self.crawler)
        lean = not self.keep_items
        self._put = self.redis.register_script(_CHECK if lean else _PUT) if self.redis is not None else None
        self._mark = (
            self.redis.register_script(_MARK_LEAN if lean else _MARK_STORED) if self.redis is not None else None
        )
        self.crawler.signals.connect(self._on_stored, items_stored)

    def _key(self, item: Any) -> tuple[str, bytes | None, str, Mapping[str, Any]] | None:
        """(cache key, field in it (lean) or ``None``, content hash or ``""``, values) of
        ``item``; ``None`` for an item without a schema that JSON cannot hold (the storage
        pipeline keeps it aside)."""
        schema = schema_of(item)
        values = item_values(item)
        unique: Any  # the unique key's value: any type, hashed as its str()
        if schema is None:
            try:
                document = document_of(item, self.document_key)
            except (TypeError, ValueError):
                return None
            unique, content_hash = f"{document.item_type}\0{document.key_hash}", document.content_hash
        else:
            try:
                content_hash = content_hash_of(item, schema)
            except (TypeError, ValueError):  # a value JSON cannot hold: cached, never found unchanged
                content_hash = ""
            unique = values.get(schema.unique_key)
        if self.keep_items:
            return cache_key_of(self.keys, unique), None, content_hash, values
        bucket, field = lean_entry(self.keys, unique, self.buckets)
        return bucket, field, content_hash, values

    async def _on_stored(self, items: list[Any]) -> None:
        if self._mark is None:
            return
        marks = [key for key in map(self._key, items) if key is not None and key[2]]
        if not marks:
            return
        try:
            groups: dict[str, list[tuple[str, bytes | None, str]]] = {}
            for key, field, content_hash, _ in marks:
                groups.setdefault(hash_tag(key) or "", []).append((key, field, content_hash))
            calls = []
            for group in groups.values():
                if self.keep_items:
                    calls.append(
                        self._mark(keys=[k for k, _, _ in group], args=[f"{self.store}:{h}" for _, _, h in group])
                    )
                else:
                    args: list[Any] = [self.ttl]
                    for _, field, h in group:
                        args += (field, stored_marker(self.store, h))
                    calls.append(self._mark(keys=[k for k, _, _ in group], args=args))
            await asyncio.gather(*calls)
        except Exception as exc:
            self.stats.inc_value("cache/errors", len(marks))
            if self.health.failed(exc):
                return  # an outage, or Redis out of memory: reported once for the worker
            if not self._marks_failing:
                self._marks_failing = True
                logger.warning(
                    "Could not mark items as stored in the Redis cache (%s); they will be written again next time, "
                    "until Redis answers",
                    describe_error(exc),
                )
        else:
            self.health.answered()
            if self._marks_failing:
                self._marks_failing = False
                logger.warning("Marking items as stored in the Redis cache works again")

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        key_hash = self._key(item) if self._put is not None else None
        if key_hash is None:
            return item
        key, field, content_hash, values = key_hash
        data = (
            _to_json(values if isinstance(values, dict) else ItemAdapter(item).asdict())
            if self.keep_items or self.push_list
            else ""
        )
        self._waiting.append((key, field, content_hash, data, item))
        self._queued += 1
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write_batches())
        return item

    async def settled(self) -> None:
        """Return once the write of every item passed so far has been answered, so that
        ``item_unchanged`` has been sent for each of them that is unchanged (right away if
        nothing is in flight)."""
        if self._answered >= self._queued:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settling.append((self._queued, done))
        await done

    def _settle(self) -> None:
        waiting = []
        for upto, done in self._settling:
            if self._answered < upto:
                waiting.append((upto, done))
            elif not done.done():
                done.set_result(None)
        self._settling = waiting

    @pipeline_hook
    async def close_spider(self) -> None:
        await self.settled()

    async def _write(self, batch: list[tuple[str, bytes | None, str, str, Any]]) -> list[Any]:
        """Write ``batch`` (lean: read its markers): one script call, or, in a sharded crawl,
        one per shard the keys fall in (concurrently) and the items list apart. Returns each
        item's stored hash (lean: marker), in order."""
        put, client = self._put, self.redis
        assert put is not None and client is not None  # process_item queues nothing without them
        if not self.keys.shards and self.keep_items:
            keys = [self.keys.items]
            args: list[Any] = [self.ttl, "1" if self.push_list else "0"]
            for key, _, content_hash, data, _ in batch:
                keys.append(key)
                args += (content_hash, data)
            return list(await put(keys=keys, args=args))
        groups: dict[str, list[int]] = {}
        for i, (key, *_) in enumerate(batch):
            groups.setdefault((hash_tag(key) or "") if self.keys.shards else "", []).append(i)
        calls = []
        for indexes in groups.values():
            if self.keep_items:
                keys = [batch[indexes[0]][0]]  # KEYS[1] (the items list) unused with push 0: a key of the slot
                args = [self.ttl, "0"]
                for i in indexes:
                    key, _, content_hash, data, _ = batch[i]
                    keys.append(key)
                    args += (content_hash, data)
            else:
                keys = [batch[i][0] for i in indexes]
                args = [batch[i][1] for i in indexes]
            calls.append(put(keys=keys, args=args))
        if self.push_list:
            await client.rpush(self.keys.items, *(data for _, _, _, data, _ in batch))
        olds: list[Any] = [None] * len(batch)
        for indexes, replies in zip(groups.values(), await asyncio.gather(*calls)):
            for i, old in zip(indexes, replies):
                olds[i] = old
        return olds

    def _stored_value(self, content_hash: str, field: bytes | None) -> bytes:
        """What the cache holds of an item whose ``content_hash`` was committed to this database."""
        if field is None:
            return f"{self.store}:{content_hash}".encode()
        return stored_marker(self.store, content_hash)

    async def _write_batches(self) -> None:
        """Write the waiting items, a batch at a time, until none is left; send
        ``item_unchanged`` for each item whose stored hash equals its content hash."""
        batch: list[tuple[str, bytes | None, str, str, Any]] = []
        try:
            await asyncio.sleep(BATCH_WINDOW)
            while self._waiting:
                batch, self._waiting = self._waiting[:BATCH_MAX], self._waiting[BATCH_MAX:]
                try:
                    olds = await self._write(batch)
                except Exception as exc:
                    self.stats.inc_value("cache/errors", len(batch))
                    # an outage, or Redis out of memory, is reported once for the worker
                    if not self.health.failed(exc) and not self._failing:
                        self._failing = True
                        logger.warning(
                            "Redis cache writes fail (%s); items go on to storage uncached until Redis answers",
                            describe_error(exc),
                        )
                    olds = [None] * len(batch)
                else:
                    self.health.answered()
                    if self._failing:
                        self._failing = False
                        logger.warning("Redis cache writes work again")
                    self.stats.inc_value("cache/written" if self.keep_items else "cache/checked", len(batch))
                    self.stats.inc_value("cache/batches")
                for (_, field, content_hash, _, item), old in zip(batch, olds):
                    if content_hash and old is not None and old == self._stored_value(content_hash, field):
                        self.stats.inc_value("cache/unchanged")
                        self.crawler.signals.send_catch_log(item_unchanged, item=item)
                self._answered += len(batch)
                batch = []
                self._settle()
        finally:
            self._writer = None
            # Cancelled mid-way (the loop closing): nobody waits forever, nothing is skipped.
            self._answered = self._queued
            self._waiting = []
            self._settle()
