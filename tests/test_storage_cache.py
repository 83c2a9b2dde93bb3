"""The Redis cache pipeline on the real Redis: batched writes that keep each item's outcome
(stored-hash check, never a dropped item on a Redis error)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from crawler.items import Page
from scrapy_frontier.pipelines.cache import BATCH_MAX, cache_key
from scrapy_frontier.signals import item_unchanged, items_stored


def page(i: int, content_hash: str | None = None) -> Page:
    return Page(
        url=f"http://h/{i}",
        status=200,
        title=f"t{i} 🕷️ é",
        links=[f"http://h/{i + 1}"],
        content_hash=content_hash or f"{i:064x}",
        fetched_at=datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).isoformat(),
    )


async def _cache(redis_url: str, rounds: list, stored_after: list | None = None, settings: dict | None = None) -> dict:
    """Open a RedisCachePipeline for spider ``site``; feed each round's items all at once
    and wait until their writes are answered (after the first round, send ``items_stored`` for
    ``stored_after``); return the stats, the items each round returned and the items reported
    unchanged per round."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.pipelines.cache import RedisCachePipeline

    crawler = get_crawler(
        type("site", (Spider,), {"name": "site"}),
        {"TWISTED_REACTOR_ENABLED": False, "REDIS_URL": redis_url, "REDIS_CACHE_TTL": 3600, **(settings or {})},
    )
    crawler.spider = crawler._create_spider()
    pipeline = RedisCachePipeline.from_crawler(crawler)
    await pipeline.open_spider()
    unchanged: list = []
    crawler.signals.connect(lambda item: unchanged[-1].append(item), item_unchanged, weak=False)
    returned = []
    try:
        for n, items in enumerate(rounds):
            unchanged.append([])
            returned.append(
                await asyncio.wait_for(asyncio.gather(*(pipeline.process_item(item) for item in items)), 60)
            )
            await asyncio.wait_for(pipeline.settled(), 60)
            if n == 0 and stored_after:
                await crawler.signals.send_catch_log_async(items_stored, items=stored_after)
    finally:
        await pipeline.redis.aclose()
    return {"stats": crawler.stats.get_stats(), "returned": returned, "unchanged": unchanged}


def test_a_burst_of_items_is_cached_in_few_script_calls(redis_url, redis_client):
    items = [page(i) for i in range(2 * BATCH_MAX + 1)]
    out = asyncio.run(_cache(redis_url, [items], settings={"REDIS_CACHE_ITEMS": True}))
    assert out["returned"] == [items]
    assert out["stats"]["cache/written"] == len(items)
    assert out["stats"]["cache/batches"] == 3  # 200 + 200 + 1, not one call per item
    assert "cache/errors" not in out["stats"]
    for item in (items[0], items[-1]):
        key = cache_key("site:items:cache:", item["url"])
        entry = redis_client.hgetall(key)
        assert entry[b"content_hash"] == item["content_hash"].encode()
        assert json.loads(entry[b"item"]) == dict(item)
        assert 0 < redis_client.ttl(key) <= 3600


def test_the_lean_cache_keeps_a_marker_per_item_in_a_few_buckets(redis_url, redis_client):
    """By default an item leaves in Redis only a marker of what was committed: 10 + 8 bytes in
    a bucket hash that stays in Redis's compact listpack encoding."""
    items = [page(i) for i in range(300)]
    out = asyncio.run(_cache(redis_url, [items], stored_after=items, settings={"REDIS_CACHE_CAPACITY": 640}))
    assert out["stats"]["cache/checked"] == 300 and out["stats"]["cache/batches"] == 2
    buckets = list(redis_client.scan_iter(match="site:items:cache:@*"))
    assert len(buckets) == 10  # REDIS_CACHE_CAPACITY / 64
    assert sum(redis_client.hlen(b) for b in buckets) == 300
    assert all(redis_client.object("encoding", b) == b"listpack" for b in buckets)
    assert not list(redis_client.scan_iter(match="site:items:cache:[0-9a-f]*"))
    per_item = sum(redis_client.memory_usage(b) for b in buckets) / 300
    print(f"FIGURES lean cache: {per_item:.0f} bytes per item (MEMORY USAGE of the buckets)")
    assert per_item < 60


@pytest.mark.parametrize("keep", ["False", "True"])
def test_only_items_the_database_confirmed_are_reported_unchanged(keep, redis_url):
    first = [page(i) for i in range(6)]
    stored = first[:3]  # the database confirmed only these
    again = [page(i) for i in range(6)]
    again[2] = page(2, content_hash="f" * 64)  # stored before, changed since
    out = asyncio.run(_cache(redis_url, [first, again], stored_after=stored, settings={"REDIS_CACHE_ITEMS": keep}))
    assert out["unchanged"][0] == []
    assert [item["url"] for item in out["unchanged"][1]] == ["http://h/0", "http://h/1"]
    assert out["stats"]["cache/unchanged"] == 2
    assert out["returned"][1] == again


@pytest.mark.parametrize("keep", ["False", "True"])
def test_a_hash_stored_in_one_database_skips_no_write_to_another(keep, redis_url):
    """A stored hash names the database that confirmed it: the same pages sent to another
    MYSQL_URL (here only the database name differs) are all written there."""
    items = [page(i) for i in range(4)]
    first = {"MYSQL_URL": "mysql://crawler:secret@db.example:3306/first", "REDIS_CACHE_ITEMS": keep}
    out = asyncio.run(_cache(redis_url, [items, items], stored_after=items, settings=first))
    assert [len(unchanged) for unchanged in out["unchanged"]] == [0, 4]
    other = asyncio.run(
        _cache(
            redis_url,
            [items],
            settings={"MYSQL_URL": "mysql://crawler:secret@db.example:3306/other", "REDIS_CACHE_ITEMS": keep},
        )
    )
    assert other["unchanged"] == [[]] and "cache/unchanged" not in other["stats"]
    again = asyncio.run(
        _cache(
            redis_url,
            [items],
            settings={"MYSQL_URL": "mysql://crawler:changed@db.example:3306/first", "REDIS_CACHE_ITEMS": keep},
        )
    )
    assert len(again["unchanged"][0]) == 4  # a new password is the same database


def test_a_redis_error_never_drops_an_item(redis_url):
    port = 1  # privileged and unused: nothing listens there (a closed ephemeral port may be reused)
    items = [page(i) for i in range(5)]
    out = asyncio.run(_cache(f"redis://127.0.0.1:{port}/0", [items]))
    assert out["returned"] == [items]
    assert out["stats"]["cache/errors"] == 5
    assert "cache/checked" not in out["stats"] and out["unchanged"] == [[]]


def test_each_crawler_gets_a_client_of_its_own_url():
    """A crawler's shared client is never another's, even when a new crawler has the ``id()`` of
    one already collected: a crawler for an unreachable Redis must not get the real Redis of the
    crawler before it (``cache/errors`` missing)."""
    import gc

    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.connection import shared_redis

    for port in range(10001, 10201):  # CPython reuses a freed id within a few dozen
        crawler = get_crawler(
            type("site", (Spider,), {"name": "site"}),
            {"TWISTED_REACTOR_ENABLED": False, "REDIS_URL": f"redis://127.0.0.1:{port}/0"},
        )
        assert shared_redis(crawler).connection_pool.connection_kwargs["port"] == port
        del crawler
        if port % 10 == 0:
            gc.collect()


async def _cache_then_storage(redis_url: str, mysql_url: str, dead_dir: str, rounds: list) -> tuple[dict, list]:
    """Run each round's items through the cache then the storage pipeline, as Scrapy chains
    them; return the stats and, per round, whether the cache had answered the first item's
    write when its ``process_item`` returned."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.pipelines.cache import RedisCachePipeline
    from scrapy_frontier.pipelines.storage import StoragePipeline

    settings = {
        "TWISTED_REACTOR_ENABLED": False,
        "REDIS_URL": redis_url,
        "MYSQL_URL": mysql_url,
        "DEAD_LETTER_DIR": dead_dir,
        "REDIS_CACHE_TTL": 3600,
    }
    crawler = get_crawler(type("site", (Spider,), {"name": "site"}), settings)
    crawler.spider = crawler._create_spider()
    cache, storage = RedisCachePipeline.from_crawler(crawler), StoragePipeline.from_crawler(crawler)
    await cache.open_spider()
    await storage.open_spider()
    storage._cache = cache  # in a crawl, found among Scrapy's item pipelines at open

    answered_at_return = []

    async def chain(item):
        item = await cache.process_item(item)
        return await storage.process_item(item)

    try:
        for items in rounds:
            first = await cache.process_item(items[0])
            answered_at_return.append(cache._answered >= cache._queued)
            await asyncio.wait_for(
                asyncio.gather(storage.process_item(first), *(chain(item) for item in items[1:])), 60
            )
        await storage.close_spider()
        await cache.close_spider()
    finally:
        await cache.redis.aclose()
    return crawler.stats.get_stats(), answered_at_return


def test_storage_waits_for_the_cache_answer_per_batch_not_per_item(redis_url, mysql_url, mysql_query, tmp_path):
    """The cache passes an item on before Redis answers; the storage batch then waits for the
    answers and skips exactly the items whose content the database already holds."""
    first = [page(i) for i in range(8)]
    again = [page(i) for i in range(8)]
    again[5] = page(5, content_hash="e" * 64)  # changed since it was stored
    stats, answered_at_return = asyncio.run(_cache_then_storage(redis_url, mysql_url, str(tmp_path), [first, again]))
    assert answered_at_return == [False, False]
    assert stats["storage/written/pages"] == 8 + 1
    assert stats["storage/skipped/unchanged"] == 7
    assert stats["cache/unchanged"] == 7
    assert mysql_query("SELECT content_hash FROM pages WHERE url = %s", "http://h/5") == (("e" * 64,),)
    assert mysql_query("SELECT COUNT(*) FROM pages")[0][0] == 8
