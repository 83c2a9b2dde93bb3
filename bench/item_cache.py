"""Redis bytes per cached item: ``MEMORY USAGE`` of the item cache's keys divided by the items.

    python -m bench.item_cache [--items 100000] [--text-bytes 3000]

Starts a redis-server of its own and sends ``--items`` ``Page`` items (a page of
``--text-bytes`` of text, as a crawl of the docs yields) through the project's
``RedisCachePipeline`` twice: in the default lean mode (each item stored, ``items_stored``
sent as the storage pipeline sends it, so that each leaves its marker) and with
``REDIS_CACHE_ITEMS`` (the whole item kept). ``REDIS_CACHE_CAPACITY`` is the item count, as a
crawl would size it. Prints one JSON line: ``{"items", "text_bytes", "lean": {...}, "full":
{...}}``, each with ``cache_bytes`` (the sum of ``MEMORY USAGE``), ``bytes_per_item``, ``keys``
and ``seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime

import redis
from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawler.items import Page
from scrapy_frontier.pipelines.cache import BATCH_MAX, RedisCachePipeline
from scrapy_frontier.signals import items_stored
from tests.servers import RedisServer


def page(i: int, text_bytes: int) -> Page:
    body = (f"Paragraph {i} of a page of the Python documentation, served on loopback. " * (text_bytes // 70 + 1))[
        :text_bytes
    ]
    return Page(
        url=f"https://docs.example.org/3/library/module{i}.html",
        status=200,
        title=f"module{i} - Python 3 documentation",
        text=body,
        links=[f"https://docs.example.org/3/library/module{i + j}.html" for j in range(1, 6)],
        content_hash=f"{i:064x}",
        fetched_at=datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC).isoformat(),
    )


async def fill(url: str, items: int, text_bytes: int, whole: bool) -> dict:
    spider_cls = type("site", (Spider,), {"name": "site"})
    settings = {
        "TWISTED_REACTOR_ENABLED": False,
        "REDIS_URL": url,
        "REDIS_CACHE_CAPACITY": items,
        "REDIS_CACHE_ITEMS": whole,
    }
    crawler = get_crawler(spider_cls, settings)
    crawler.spider = crawler._create_spider()
    pipeline = RedisCachePipeline.from_crawler(crawler)
    await pipeline.open_spider()
    started = time.monotonic()
    try:
        for start in range(0, items, BATCH_MAX * 5):
            batch = [page(i, text_bytes) for i in range(start, min(items, start + BATCH_MAX * 5))]
            await asyncio.gather(*(pipeline.process_item(item) for item in batch))
            await pipeline.settled()
            await crawler.signals.send_catch_log_async(items_stored, items=batch)
            await pipeline.settled()
    finally:
        await pipeline.redis.aclose()
    seconds = time.monotonic() - started
    sync = redis.Redis.from_url(url)
    total = keys = 0
    for key in sync.scan_iter(match="site:items:cache:*", count=1000):
        total += sync.memory_usage(key, samples=0) or 0
        keys += 1
    sync.flushdb()
    return {"cache_bytes": total, "bytes_per_item": round(total / items, 1), "keys": keys, "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--text-bytes", type=int, default=3000)
    args = parser.parse_args()
    with RedisServer() as server:  # a redis-server of its own
        out = {"items": args.items, "text_bytes": args.text_bytes}
        out["lean"] = asyncio.run(fill(server.url, args.items, args.text_bytes, whole=False))
        out["full"] = asyncio.run(fill(server.url, args.items, args.text_bytes, whole=True))
        print(json.dumps(out))


if __name__ == "__main__":
    main()
