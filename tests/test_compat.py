"""scrapy-redis spiders, and plain spiders run as under scrapy-redis's scheduler: real ``scrapy
crawl`` processes (``tests/spiders/compat.py``) against the machine's Redis and HTTP servers on
loopback; the rules as plain functions."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio
from scrapy import Spider
from scrapy.settings import Settings
from scrapy.spiders import CrawlSpider, SitemapSpider
from scrapy.utils.test import get_crawler
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider

from crawler.spiders.modules import ModulesSpider
from crawler.spiders.site import SiteSpider
from scrapy_frontier.addon import DistributedAddon
from scrapy_frontier.config import failed_at_open
from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.scheduler.config import SchedulerConfig
from scrapy_frontier.scrapy_redis_compat import close_after, queue_order, waits_for_start_urls
from tests.spiders.compat import CompatPlainSpider

COMPAT = {"SPIDER_MODULES": "tests.spiders"}


def test_which_spiders_wait_for_start_urls():
    assert all(
        waits_for_start_urls(cls.__new__(cls)) for cls in (RedisSpider, RedisCrawlSpider, SiteSpider, ModulesSpider)
    )
    assert not any(waits_for_start_urls(cls.__new__(cls)) for cls in (Spider, CrawlSpider, SitemapSpider))
    # MAX_IDLE_TIME_BEFORE_CLOSE / max_idle_time for any spider; else never for one that waits,
    # SCHEDULER_IDLE_BEFORE_CLOSE (at least a second: two idle checks apart) for one that does not
    assert close_after(5, 2, True) == close_after(5, 2, False) == 5
    assert close_after(0, 3, True) == 0 and close_after(0, 3, False) == 3 and close_after(0, 0, False) == 1


def test_spider_attributes_are_read_from_the_instance_and_bad_ones_refused(redis_url):
    crawler = get_crawler(CompatPlainSpider, {"REDIS_URL": redis_url, "ADDONS": {DistributedAddon: 0}})
    config = SchedulerConfig.from_crawler(crawler)
    spider = CompatPlainSpider(url="http://127.0.0.9/")
    spider.redis_key, spider.redis_batch_size, spider.max_idle_time = "%(name)s:seeds", 3, 4
    own = config.for_spider(spider, crawler.settings)
    assert (own.start_urls_key, own.start_batch, own.close_after) == ("%(name)s:seeds", 3, 4)
    for key, message in ((["a", "b"], "one key is supported"), (" ", "CompatPlainSpider.redis_key is empty")):
        spider.redis_key = key
        with pytest.raises(ValueError, match=message):
            config.for_spider(spider, crawler.settings)
    spider.redis_key, spider.redis_encoding = "k", "no-such-codec"
    with pytest.raises(ValueError, match="redis_encoding='no-such-codec' is not a known encoding"):
        config.for_spider(spider, crawler.settings)


def test_scheduler_queue_class_maps_onto_the_frontier_order(redis_url, caplog):
    assert queue_order(None) == queue_order("scrapy_redis.queue.PriorityQueue") == "priority"
    assert queue_order("scrapy_redis.queue.FifoQueue") == queue_order("scrapy_redis.queue.SpiderQueue") == "fifo"
    assert queue_order("scrapy_redis.queue.LifoQueue") == "lifo"
    crawler = get_crawler(
        CompatPlainSpider,
        {"REDIS_URL": redis_url, "ADDONS": {DistributedAddon: 0}, "SCHEDULER_QUEUE_CLASS": "shop.queues.Mine"},
    )
    SchedulerConfig.from_crawler(crawler)
    assert failed_at_open(crawler)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "SCHEDULER_QUEUE_CLASS='shop.queues.Mine' is not supported: the frontier keeps one queue per host, served "
        "by priority then first in, first out; remove the setting, or set one of scrapy-redis's queues "
        "(scrapy_redis.queue.FifoQueue, scrapy_redis.queue.LifoQueue, scrapy_redis.queue.PriorityQueue, "
        "scrapy_redis.queue.SpiderPriorityQueue, scrapy_redis.queue.SpiderQueue, scrapy_redis.queue.SpiderStack)"
    ]


def test_redis_spider_attributes_come_from_the_instance(docs_site, start_worker, redis_url, redis_client):
    """A RedisSpider whose redis_key, redis_encoding and max_idle_time are set in ``__init__``:
    its pushed URLs (on a host outside its allowed_domains) are read from that key, decoded
    with that encoding, fetched (dont_filter, as scrapy-redis makes them) once each, and the
    worker exits by itself after max_idle_time; a payload saying ``"dont_filter": false`` is
    dropped by the offsite filter, the first drop logged at INFO."""
    worker = start_worker(
        "compat_redis",
        settings={**COMPAT, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.LifoQueue"},
        env={"REDIS_URL": redis_url},
        args=["-a", "key=compat_redis:seeds", "-a", "encoding=latin-1", "-a", "max_idle=2"],
    )
    worker.wait_for("Joined the crawl")
    base = docs_site.url
    pages = ["library/json.html", "library/os.html", "library/re.html"]
    redis_client.lpush(
        "compat_redis:seeds",
        *[f"{base}{p}" for p in pages],
        f"{base}library/json.html",  # pushed twice: fetched once
        f"{base}library/sys.html?q=caf\xe9".encode("latin-1"),
        json.dumps({"url": f"{base}library/io.html", "dont_filter": False}),
        json.dumps({"url": f"{base}library/abc.html", "dont_filter": False}),
    )
    started = time.monotonic()
    assert worker.wait(60) == 0, worker.output[-3000:]
    out = worker.output
    assert "start URLs come from compat_redis:seeds through the frontier" in out
    assert worker.stat("item_scraped_count") == 4 and worker.stat("robotstxt/request_count") == 1
    assert worker.stat("start_urls/accepted") == 7  # the latin-1 one too
    assert "robots.txt" not in out  # fetched for the pushed host, though outside allowed_domains
    assert worker.stat("frontier/dropped/ignored") == 2 and worker.stat("offsite/filtered") == 2
    drops = [line for line in out.splitlines() if "Dropped before its response reached the spider" in line]
    assert len(drops) == 1 and " INFO: " in drops[0] and "Filtered offsite request to '127.0.0.2'" in drops[0]
    assert "CompatRedisSpider.next_requests is not called here: start URLs are taken by the frontier under lease" in out
    assert "INFO: Requests are served last in, first out (SCHEDULER_QUEUE_CLASS=scrapy_redis.queue.LifoQueue)" in out
    assert "'finish_reason': 'finished'" in out and time.monotonic() - started < 30


def test_plain_spider_workers_close_when_the_crawl_is_dry(tutorial_site, start_worker, redis_url, redis_client):
    """Two workers of a CrawlSpider with start_urls (scrapy-redis's example ``dmoz``), no
    MAX_IDLE_TIME_BEFORE_CLOSE: every page fetched once (the start page twice, as in plain
    Scrapy), and both exit once the whole crawl has
    been dry for SCHEDULER_IDLE_BEFORE_CLOSE, the second started after the first's start
    requests landed; a FIFO queue class is said to be served by priority too."""
    server, expected = tutorial_site
    settings = {
        **COMPAT,
        "SCHEDULER_IDLE_BEFORE_CLOSE": "2",
        "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue",
        "DOMAIN_RATE_LIMIT": "10",
        "SCHEDULER_PERSIST": "True",
    }
    args = ["-a", f"url={server.url}tutorial/index.html"]
    first = start_worker("compat_plain", settings=settings, env={"REDIS_URL": redis_url}, args=args)
    deadline = time.monotonic() + 30
    while "/tutorial/index.html" not in server.fetches() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = start_worker("compat_plain", settings=settings, env={"REDIS_URL": redis_url}, args=args)
    for w in (first, second):
        assert w.wait(60) == 0, w.output[-3000:]
        assert "'finish_reason': 'finished'" in w.output
        assert "the whole crawl has been idle for 2s" in w.output
        assert "first in, first out among those of one priority; a higher priority still goes first" in w.output
    fetched = server.fetches()
    assert {server.url + p.lstrip("/") for p in fetched if p.endswith(".html")} == expected
    # the start page twice, as a start request and as a link its rule follows (as plain Scrapy)
    html = {p: n for p, n in fetched.items() if p.endswith(".html")}
    assert all(n == (2 if p == "/tutorial/index.html" else 1) for p, n in html.items()), fetched
    assert not list(redis_client.scan_iter(match="compat_plain:leases:*"))
    assert redis_client.hget("compat_plain:dupefilter:meta", "order") == b"fifo"


def test_a_lifo_frontier_serves_each_host_newest_first(redis_url):
    """A LIFO crawl's pushes (SCHEDULER_QUEUE_CLASS LifoQueue) put a host's new requests before
    those queued earlier, within a priority; the default order is first in, first out."""
    keys = Keys.for_spider(Settings(), "compat_plain")

    def entry(url, score=0):
        return Entry(url, "h", score, json.dumps({"url": url}, separators=(",", ":")))

    async def order(lifo):
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            old = [k async for k in client.scan_iter(match="compat_plain:*")]
            if old:
                await client.delete(*old)
            frontier = Frontier(client, keys, "n1", lifo=lifo)
            await frontier.push([entry("a"), entry("b")])
            await frontier.push([entry("c"), entry("top", score=-1)])
            return [json.loads(lease.payload)["url"] for lease in await frontier.lease(10)]
        finally:
            await client.aclose()

    assert asyncio.run(order(True)) == ["top", "c", "b", "a"]
    assert asyncio.run(order(False)) == ["top", "a", "b", "c"]


@pytest.mark.parametrize("spider", ["compat_bad", "compat_bad_redis"])
def test_a_list_of_redis_keys_is_refused_at_start(spider, start_worker, redis_url, redis_client):
    """A list ``redis_key`` stops the crawl before anything is written. On a RedisSpider,
    scrapy-redis's own ``setup_redis`` fails on it while Scrapy makes the spider, before any
    add-on loads: Scrapy's traceback and exit status then (the ``-a`` check of scrapy crawl went
    with the package's own crawl command)."""
    worker = start_worker(spider, settings=COMPAT, env={"REDIS_URL": redis_url})
    assert worker.wait(60) == 1, worker.output[-3000:]
    assert not redis_client.exists(f"{spider}:dupefilter:meta")
    if spider == "compat_bad_redis":
        return
    errors = [line for line in worker.output.splitlines() if "ERROR" in line or line.startswith("error:")]
    assert len(errors) == 1 and "redis_key is a list of keys: not supported" in errors[0], worker.output[-3000:]
    assert "Traceback" not in worker.output
