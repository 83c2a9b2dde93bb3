"""The scheduler's parts in-process, against real Redis: its config, the join, the local seen cache, the send buffer."""

import asyncio
import logging

import redis
from scrapy import Spider
from scrapy.utils.test import get_crawler

from scrapy_frontier.addon import DistributedAddon
from scrapy_frontier.config import failed_at_open
from scrapy_frontier.dupefilter import fingerprint_int64
from scrapy_frontier.redis_health import RedisHealth
from scrapy_frontier.scheduler.buffer import SendBuffer
from scrapy_frontier.scheduler.config import SchedulerConfig
from scrapy_frontier.scheduler.join import NodeHooks, join
from scrapy_frontier.scheduler.seen_cache import SeenCache
from tests.loopback import free_port


class ProbeSpider(Spider):
    name = "probe"


class BatchSpider(ProbeSpider):
    redis_batch_size = 7


def crawler_of(redis_url, spidercls=ProbeSpider, **settings):
    return get_crawler(spidercls, {"REDIS_URL": redis_url, "ADDONS": {DistributedAddon: 0}, **settings})


def errors(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


HOOKS = NodeHooks(info=dict, dropped=lambda: None, reclaimed=lambda leases, nodes: None, state_lost=lambda: None)


def join_once(crawler, node="n1"):
    """join() on a fresh loop; the session's heartbeat client and the crawler's client closed after."""
    config = SchedulerConfig.from_crawler(crawler)

    async def go():
        session = await join(crawler, config, crawler.spidercls(), node, RedisHealth(), HOOKS)
        if session is not None:
            session.heartbeat.client.close()
            await session.client.aclose()
        return session

    return asyncio.run(go())


# -- config ----------------------------------------------------------------------------------


def test_a_download_delay_and_autothrottle_hold_for_the_whole_crawl(redis_url, caplog):
    """DOWNLOAD_DELAY becomes the crawl's DOMAIN_RATE_LIMIT (logged), each worker's own delay goes;
    AutoThrottle's settings become the shared one's, and Scrapy's per-process extension is off. An
    explicit DOMAIN_RATE_LIMIT leaves DOWNLOAD_DELAY to each worker, as Scrapy has it."""
    from scrapy.extensions.throttle import AutoThrottle

    with caplog.at_level(logging.INFO):
        crawler = crawler_of(
            redis_url, DOWNLOAD_DELAY=0.5, AUTOTHROTTLE_ENABLED=True, AUTOTHROTTLE_TARGET_CONCURRENCY=3
        )
        crawler._apply_settings()
    config = SchedulerConfig.from_crawler(crawler)
    assert config.domain_rate == 2.0 and crawler.settings.getfloat("DOWNLOAD_DELAY") == 0
    assert config.autothrottle is not None
    assert (config.autothrottle.target_concurrency, config.autothrottle.start_delay) == (3.0, 5.0)
    assert crawler.settings.getdict("EXTENSIONS").get(AutoThrottle, "absent") is None
    assert any("DOWNLOAD_DELAY = 0.5 holds for the whole crawl" in r.getMessage() for r in caplog.records)
    explicit = crawler_of(redis_url, DOWNLOAD_DELAY=0.5, DOMAIN_RATE_LIMIT=0)
    explicit._apply_settings()
    assert SchedulerConfig.from_crawler(explicit).domain_rate == 0
    assert explicit.settings.getfloat("DOWNLOAD_DELAY") == 0.5


def test_config_reads_every_setting_once_with_its_defaults(redis_url):
    crawler = crawler_of(redis_url, CONCURRENT_REQUESTS=24, FRONTIER_HEARTBEAT_INTERVAL=2, DOMAIN_RATE_LIMIT="1.5")
    config = SchedulerConfig.from_crawler(crawler)
    assert config.prefetch == 24  # FRONTIER_PREFETCH 0: CONCURRENT_REQUESTS
    assert config.heartbeat_interval == 2.0 and config.node_timeout == 12.0  # 6 heartbeats
    # DOMAIN_CONCURRENCY unset: one worker's CONCURRENT_REQUESTS_PER_DOMAIN (8) for the whole crawl
    assert config.domain_rate == 1.5 and config.domain_concurrency == 8
    assert config.autothrottle is None  # Scrapy's AUTOTHROTTLE_ENABLED: off
    assert config.shards is None and config.wait_replicas is None  # decided at join
    assert config.redis_url == redis_url and config.crawls_key == "scrapy-frontier:crawls"
    assert config.dedup is not None and not failed_at_open(crawler)
    assert config.for_spider(BatchSpider(), crawler.settings).start_batch == 7
    plain = config.for_spider(ProbeSpider(), crawler.settings)
    assert plain.start_batch == config.start_batch and plain.start_urls_key is None


def test_config_refuses_each_bad_setting_in_one_line(redis_url, caplog):
    crawler = crawler_of(
        redis_url,
        FRONTIER_HEARTBEAT_INTERVAL=5,
        FRONTIER_NODE_TIMEOUT=6,
        FRONTIER_SHARDS=20000,
        CRAWL_ID="a:b",
        DUPEFILTER_MODE="nope",
        FRONTIER_POLL_MAX="x",
    )
    with caplog.at_level(logging.ERROR):
        config = SchedulerConfig.from_crawler(crawler)
    lines = errors(caplog)
    assert failed_at_open(crawler)
    for name in ("FRONTIER_NODE_TIMEOUT", "FRONTIER_SHARDS", "CRAWL_ID", "DUPEFILTER_MODE", "FRONTIER_POLL_MAX"):
        assert sum(name in line for line in lines) == 1, (name, lines)
    assert config.poll_max == 1.0 and config.dedup is None  # defaults stand meanwhile


# -- join ------------------------------------------------------------------------------------


def test_join_returns_a_ready_session_and_a_second_node_joins_the_same_crawl(redis_url):
    client = redis.Redis.from_url(redis_url)
    first = join_once(crawler_of(redis_url), "n1")
    second = join_once(crawler_of(redis_url), "n2")
    assert first is not None and second is not None
    assert first.keys.crawl == second.keys.crawl == "probe"
    assert {m.decode() for m in client.zrange("probe:nodes", 0, -1)} == {"n1", "n2"}  # both beat once
    meta = client.hgetall("probe:dupefilter:meta")
    assert meta[b"ranked"] == b"1" and meta[b"shards"] == b"0"
    assert first.seen.enabled and first.frontier.seen_feed  # a single Redis: the first look is on
    client.close()


def test_join_refuses_a_crawl_of_an_unreleased_format_in_one_line(redis_url, caplog):
    client = redis.Redis.from_url(redis_url)
    assert join_once(crawler_of(redis_url)) is not None
    client.hdel("probe:dupefilter:meta", "ranked")  # as the versions before the format wrote it
    client.zadd("probe:requests", {"h": 0})
    crawler = crawler_of(redis_url)
    with caplog.at_level(logging.ERROR):
        assert join_once(crawler, "n2") is None
    (line,) = errors(caplog)
    assert "'probe'" in line and "probe:dupefilter:meta" in line and "start the crawl over" in line
    assert failed_at_open(crawler)
    assert client.zrange("probe:nodes", 0, -1) == [b"n1"]  # the refused node wrote nothing
    client.close()


def test_join_refuses_a_crawl_holding_leases_of_an_unreleased_format(redis_url, caplog):
    client = redis.Redis.from_url(redis_url)
    assert join_once(crawler_of(redis_url)) is not None
    client.hset("probe:leases:n1", mapping={b'{"url":"https://h/a"}': b"0\th", b"1.1\t0\th": b"/b"})
    crawler = crawler_of(redis_url)
    with caplog.at_level(logging.ERROR):
        assert join_once(crawler, "n2") is None
    (line,) = errors(caplog)
    assert "'probe' has 1 lease held in a format" in line and "start it over" in line
    client.hdel("probe:leases:n1", '{"url":"https://h/a"}')
    assert join_once(crawler_of(redis_url), "n3") is not None  # leases of the current format only
    client.close()


def test_join_refuses_start_urls_of_the_wrong_type_and_an_unreachable_redis(redis_url, caplog):
    client = redis.Redis.from_url(redis_url)
    client.sadd("probe:start_urls", "http://a.example/")
    with caplog.at_level(logging.ERROR):
        assert join_once(crawler_of(redis_url)) is None
        assert join_once(crawler_of(f"redis://127.0.0.1:{free_port()}/0")) is None
    wrong_type, unreachable = errors(caplog)
    assert "probe:start_urls is a Redis set" in wrong_type and "REDIS_START_URLS_AS_SET" in wrong_type
    assert "cannot use Redis" in unreachable
    assert not client.exists("probe:dupefilter:meta") and not client.exists("probe:nodes")
    client.close()


def test_join_takes_a_setting_that_already_stopped_the_crawl_as_final(redis_url):
    crawler = crawler_of(redis_url, FRONTIER_POLL_MAX="x")
    assert join_once(crawler) is None
    assert not redis.Redis.from_url(redis_url).exists("probe:dupefilter:meta")  # joined nothing


# -- the local seen cache ------------------------------------------------------------------


def test_seen_cache_is_bounded_and_off_at_zero():
    cache = SeenCache(3)
    for key in (1, 2, 3):
        cache.add(key)
    assert 1 in cache and len(cache) == 3
    cache.add(4)  # full: emptied first
    assert 1 not in cache and 4 in cache and len(cache) == 1
    off = SeenCache(0)
    off.add(1)
    assert not off.enabled and 1 not in off and off.learn([b"1,2"], packed=True) == 0


def test_seen_cache_learns_the_seen_feed_in_either_layout():
    digest = bytes.fromhex("0123456789abcdef" + "00" * 12)
    cache = SeenCache(100)
    assert cache.learn([b"5,6", b"7"], packed=True) == 3
    assert cache.learn([digest.hex().encode()], packed=False) == 1
    assert all(key in cache for key in (5, 6, 7, fingerprint_int64(digest))) and len(cache) == 4


def test_seen_cache_is_emptied_when_scrapy_forget_ran():
    cache = SeenCache(10)
    assert not cache.forgets_seen(b"0")  # the first count read: nothing to forget
    cache.add(1)
    assert not cache.forgets_seen(b"0") and 1 in cache
    assert cache.forgets_seen(b"1") and 1 not in cache


def test_send_buffer_holds_a_request_booked_for_later_until_its_time():
    buffer = SendBuffer()
    buffer.append("free-1", None, now=10.0)
    buffer.append("at-12", 12.0, now=10.0)
    buffer.append("at-11", 11.0, now=10.0)
    buffer.append("due", 9.5, now=10.0)  # booked for now: before the requests with no booking
    buffer.append("free-2", None, now=10.0)
    assert len(buffer) == 5 and buffer.counted == 5 and buffer.next_send() == 11.0
    assert [buffer.pop(10.0), buffer.pop(10.0), buffer.pop(10.0), buffer.pop(10.0)] == ["due", "free-1", "free-2", None]
    assert buffer.pop(11.5) == "at-11" and buffer.pop(11.5) is None
    assert sorted(buffer) == ["at-12"] and buffer.pop(12.0) == "at-12" and buffer.next_send() is None
    # booked by AutoThrottle alone: not counted against the prefetch until its time comes
    buffer.append("paced-13", 13.0, now=12.0, strict=False)
    buffer.append("at-14", 14.0, now=12.0)
    assert len(buffer) == 2 and buffer.counted == 1
    assert buffer.pop(13.0) == "paced-13" and buffer.counted == 1
    buffer.append("paced-15", 15.0, now=13.0, strict=False)
    buffer.clear()
    assert len(buffer) == 0 and buffer.counted == 0 and buffer.pop(16.0) is None
