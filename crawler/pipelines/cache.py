"""Redis write-through cache: the latest version of every item, keyed by its unique key."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.exceptions import NotConfigured

from crawler.distributed.connection import describe_error, optional_shared_redis
from crawler.distributed.keys import Keys
from crawler.schema import schema_of
from crawler.startup import read_setting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Sent with ``item=`` when an item's content hash equals the one last stored (storage skips it).
item_unchanged = object()
#: Sent by the storage pipeline with ``items=`` once those items are committed to the database.
items_stored = object()

_PUT = """
-- KEYS: cache key, items list.  ARGV: content hash, item json, ttl seconds, push to list (1/0)
-- Returns the content hash last confirmed as stored in the database (field stored_hash).
local stored = redis.call('HGET', KEYS[1], 'stored_hash')
redis.call('HSET', KEYS[1], 'content_hash', ARGV[1], 'item', ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
if ARGV[4] == '1' then redis.call('RPUSH', KEYS[2], ARGV[2]) end
return stored
"""


def cache_key(prefix: str, unique_value: Any) -> str:
    """``<spider>:items:cache:<sha1 hex of the unique key's value>``."""
    return prefix + hashlib.sha1(str(unique_value).encode()).hexdigest()


class RedisCachePipeline:
    """Write every item with a schema to ``<spider>:items:cache:<sha1(unique key)>``, a hash of
    ``content_hash`` and ``item`` (JSON) that expires after ``REDIS_CACHE_TTL`` seconds; with
    ``REDIS_ITEMS_LIST`` also append it to ``<spider>:items`` (scrapy-redis's RedisPipeline).

    When the item's ``content_hash`` equals the hash the storage pipeline last confirmed as
    committed (``stored_hash``, set on the ``items_stored`` signal, in one round trip per
    batch), the database write is skipped (stat ``cache/unchanged``): an item is never skipped
    because of a cache entry whose write did not reach the database. Needs ``REDIS_URL``; a
    Redis error never drops the item (stat ``cache/errors``).
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not read_setting(crawler, "REDIS_CACHE_ENABLED", bool, True):
            raise NotConfigured("REDIS_CACHE_ENABLED is off")
        if not settings.get("REDIS_URL"):
            raise NotConfigured  # embedded mode: nothing to cache in, nothing to warn about
        self.ttl = read_setting(crawler, "REDIS_CACHE_TTL", int, 7 * 24 * 3600, minimum=0)
        self.push_list = read_setting(crawler, "REDIS_ITEMS_LIST", bool, False)
        self.crawler = crawler
        self.stats = crawler.stats
        self._failing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisCachePipeline:
        return cls(crawler)

    async def open_spider(self) -> None:
        self.keys = Keys.for_spider(self.crawler.settings, self.crawler.spider.name)
        self.redis = optional_shared_redis(self.crawler)
        self._put = self.redis.register_script(_PUT) if self.redis is not None else None
        self.crawler.signals.connect(self._on_stored, items_stored)

    def _key(self, item: Any) -> tuple[str, str] | None:
        schema = schema_of(item)
        if schema is None:
            return None
        adapter = ItemAdapter(item)
        return cache_key(self.keys.item_cache_prefix, adapter.get(schema.unique_key)), str(adapter.get("content_hash") or "")

    async def _on_stored(self, items: list[Any]) -> None:
        if self.redis is None:
            return
        marks = [key for key in map(self._key, items) if key is not None and key[1]]
        if not marks:
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for key, content_hash in marks:
                    pipe.hset(key, "stored_hash", content_hash)
                await pipe.execute()
        except Exception as exc:
            self.stats.inc_value("cache/errors")
            logger.warning("Could not mark %d items as stored in the Redis cache (%s)", len(marks), describe_error(exc))

    async def process_item(self, item: Any) -> Any:
        key_hash = self._key(item) if self._put is not None else None
        if key_hash is None:
            return item
        key, content_hash = key_hash
        data = json.dumps(ItemAdapter(item).asdict(), ensure_ascii=False, default=str)
        try:
            old = await self._put(keys=[key, self.keys.items], args=[content_hash, data, self.ttl, "1" if self.push_list else "0"])
        except Exception as exc:
            self.stats.inc_value("cache/errors")
            if not self._failing:
                self._failing = True
                logger.warning("Redis cache writes fail (%s); items go on to storage uncached until Redis answers", describe_error(exc))
            return item
        if self._failing:
            self._failing = False
            logger.warning("Redis cache writes work again")
        self.stats.inc_value("cache/written")
        if content_hash and old is not None and old.decode() == content_hash:
            self.stats.inc_value("cache/unchanged")
            self.crawler.signals.send_catch_log(item_unchanged, item=item)
        return item
