"""The fates of the scrapy-redis settings and spider attributes (docs/spiders.md, "scrapy-redis
settings" and "scrapy-redis spider attributes") that the other tests do not show: the key
settings, ``DUPEFILTER_DEBUG``, ``SCHEDULER_DUPEFILTER_CLASS``, scrapy-redis's ``RedisPipeline``
and ``make_request_from_data`` and ``redis_key_check_interval`` of a ``RedisSpider`` in one real
``scrapy crawl`` (``tests/spiders/fates.py``); ``REDIS_DECODE_RESPONSES`` and the idle backoff's
shape in-process, against the real Redis."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

from scrapy import Spider
from scrapy.utils.test import get_crawler

from scrapy_frontier.addon import DistributedAddon
from scrapy_frontier.config import failed_at_open
from scrapy_frontier.connection import async_redis, sync_redis
from scrapy_frontier.scheduler.config import SchedulerConfig
from tests.test_scheduler_parts import join_once

ADDON = {DistributedAddon: 0}

#: The scrapy-redis key settings, each naming a key none of the defaults starts with.
KEYS = {
    "SCHEDULER_QUEUE_KEY": "%(spider)s:q",
    "SCHEDULER_DUPEFILTER_KEY": "%(spider)s:seen",
    "STATS_KEY": "%(spider)s:totals",
    "REDIS_START_URLS_KEY": "%(name)s:seeds",
    "REDIS_ITEMS_KEY": "%(spider)s:out",
}
#: The keys' default names (docs/spiders.md): none of them, nor a key under them, may appear.
DEFAULTS = ("fates:requests", "fates:dupefilter", "fates:stats", "fates:start_urls", "fates:items")


class KeyWatcher(threading.Thread):
    """Every key name under ``fates:`` seen in Redis, SCANned every 10 ms until stopped."""

    def __init__(self, client) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.seen: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.seen.update(k.decode() for k in self.client.scan_iter(match="fates:*", count=1000))
            time.sleep(0.01)

    def stop(self) -> set[str]:
        self.done.set()
        self.join()
        self.seen.update(k.decode() for k in self.client.scan_iter(match="fates:*", count=1000))
        return self.seen


def test_key_settings_redis_pipeline_and_make_request_from_data_in_one_crawl(
    docs_site, start_worker, redis_url, redis_client
):
    """One ``scrapy crawl`` of a RedisSpider with every scrapy-redis key setting renamed, its
    ``RedisPipeline`` listed with a serializer of its own, ``DUPEFILTER_DEBUG`` and a
    ``SCHEDULER_DUPEFILTER_CLASS`` that does not exist: each key is written under its setting's
    name and none under a default one; the class's ``make_request_from_data`` makes two requests
    of one payload and the payload it raises on is kept in ``<REDIS_START_URLS_KEY>:invalid``."""
    base = docs_site.url
    pages = [f"{base}library/{name}.html" for name in ("json", "os", "re", "sys")]
    worker = start_worker(
        "fates",
        settings={
            "SPIDER_MODULES": "tests.spiders",
            **KEYS,
            "ITEM_PIPELINES": json.dumps({"scrapy_redis.pipelines.RedisPipeline": 400}),
            "REDIS_ITEMS_SERIALIZER": "tests.spiders.fates.serialize_item",
            "SCHEDULER_DUPEFILTER_CLASS": "no_such_module.NoSuchDupeFilter",
            "DUPEFILTER_DEBUG": "True",
            "LOG_LEVEL": "DEBUG",
            "SCHEDULER_PERSIST": "True",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "1",
            "FRONTIER_POLL_MAX": "0.2",
            "DOMAIN_RATE_LIMIT": "2",  # requests wait in the queue: SCHEDULER_QUEUE_KEY seen
            "ROBOTSTXT_OBEY": "False",
        },
        env={"REDIS_URL": redis_url},
    )
    watcher = KeyWatcher(redis_client)
    watcher.start()
    worker.wait_for("Joined the crawl")
    redis_client.lpush("fates:seeds", " ".join(pages[:2]), b"boom: no request", b"skip", " ".join(pages[2:]))
    try:
        assert worker.wait(30) == 0, worker.output[-3000:]
    finally:
        keys = watcher.stop()
    out = worker.output
    errors = [line for line in out.splitlines() if " ERROR: " in line]
    assert not errors and "Traceback" not in out, out[-3000:]
    # SCHEDULER_QUEUE_KEY: the frontier's key and the prefix of its per-host queues
    assert "fates:q" in keys and any(k.startswith("fates:q:127.0.0.2") for k in keys), sorted(keys)
    # SCHEDULER_DUPEFILTER_KEY: the dupefilter (kept: SCHEDULER_PERSIST) and its meta
    assert int(redis_client.get("fates:seen:count")) == 4
    assert redis_client.hget("fates:seen:meta", "fingerprinter") is not None
    # STATS_KEY: the cluster totals' hash
    totals = {k.decode(): int(v) for k, v in redis_client.hgetall("fates:totals").items()}
    assert totals.get("pages") == 4, totals
    # REDIS_START_URLS_KEY: the payloads were read from it, the refused one kept under it
    assert redis_client.llen("fates:seeds") == 0
    (refused,) = [json.loads(r) for r in redis_client.lrange("fates:seeds:invalid", 0, -1)]
    assert (refused["reason"], refused["payload"]) == ("make_request_from_data", "boom: no request")
    # REDIS_ITEMS_KEY, REDIS_ITEMS_SERIALIZER: scrapy-redis's RedisPipeline ran as it is, with its
    # serializer; the project's item keys (the cache) are under REDIS_ITEMS_KEY too
    listed = [raw.decode() for raw in redis_client.lrange("fates:out", 0, -1)]
    assert all(raw.startswith("fates-serializer:") for raw in listed), listed
    items = [json.loads(raw.removeprefix("fates-serializer:")) for raw in listed]
    assert sorted(item["url"] for item in items) == pages
    assert any(k.startswith("fates:out:cache:") for k in keys), sorted(keys)
    # none of the default names was written
    assert not [k for k in keys if k.startswith(DEFAULTS)], sorted(keys)
    # make_request_from_data of the class: called for each payload, one made two requests, the
    # one that raised was refused in one line
    assert all(item["made_by"] == "fates" for item in items)
    assert worker.stat("start_urls/accepted") == 4 and worker.stat("start_urls/refused/make_request_from_data") == 1
    assert worker.stat("start_urls/no_request") == 1  # "skip": the spider's choice, not a dead letter
    assert (
        "WARNING: Refused start URL payload 'boom: no request' (make_request_from_data): "
        "FatesSpider.make_request_from_data raised ValueError: a payload this spider cannot make a request of" in out
    )
    # redis_key_check_interval = 3600: not read (the payloads pushed after the worker joined were
    # read at once), and not mentioned
    assert "redis_key_check_interval" not in out
    # DUPEFILTER_DEBUG: every filtered request logged, not only the first
    filtered = [line for line in out.splitlines() if "Filtered duplicate request" in line]
    assert sorted(line.split("<GET ")[1].rstrip(">") for line in filtered) == pages, filtered
    assert "no more duplicates will be shown" not in out


# -- in-process ------------------------------------------------------------------------------


class FatesProbe(Spider):
    name = "fates"


def crawler_of(redis_url, **settings):
    return get_crawler(FatesProbe, {"REDIS_URL": redis_url, "ADDONS": ADDON, **settings})


def test_redis_decode_responses_is_for_scrapy_redis_clients_only(redis_url, redis_client):
    """scrapy-redis's own client (``get_redis_from_settings``, its ``RedisPipeline``) returns
    ``str``; the frontier's clients read bytes, and the worker joins the crawl."""
    from scrapy_redis.connection import get_redis_from_settings
    from scrapy_redis.pipelines import RedisPipeline

    crawler = crawler_of(redis_url, REDIS_DECODE_RESPONSES=True)
    redis_client.set("fates:probe", "caf\u00e9")
    theirs = get_redis_from_settings(crawler.settings)
    assert theirs.get("fates:probe") == "caf\u00e9"
    assert RedisPipeline.from_crawler(crawler).server.get("fates:probe") == "caf\u00e9"
    ours = sync_redis(crawler.settings)
    assert ours.get("fates:probe") == "caf\u00e9".encode()

    async def read_async():
        client = async_redis(crawler.settings)
        try:
            return await client.get("fates:probe")
        finally:
            await client.aclose()

    assert asyncio.run(read_async()) == "caf\u00e9".encode()
    assert join_once(crawler) is not None and not failed_at_open(crawler)
    assert redis_client.hget("fates:dupefilter:meta", "fingerprinter") is not None
    theirs.close()
    ours.close()


def test_scheduler_dupefilter_class_is_not_read(redis_url, redis_client, caplog):
    """A class that does not exist in SCHEDULER_DUPEFILTER_CLASS changes nothing: no line, the
    same DUPEFILTER_CLASS, and the worker joins the crawl."""
    caplog.set_level(logging.INFO)
    plain = crawler_of(redis_url)
    crawler = crawler_of(redis_url, SCHEDULER_DUPEFILTER_CLASS="no_such_module.NoSuchDupeFilter")
    assert crawler.settings["DUPEFILTER_CLASS"] == plain.settings["DUPEFILTER_CLASS"]
    assert not [r for r in caplog.records if "SCHEDULER_DUPEFILTER_CLASS" in r.getMessage()]
    caplog.clear()
    assert join_once(crawler) is not None and not failed_at_open(crawler)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert redis_client.exists("fates:dupefilter:meta")


def test_idle_backoff_shape_is_not_used_in_one_info_line(redis_url, caplog):
    """REDIS_IDLE_BACKOFF_ENABLED, _MIN and _FACTOR: one INFO line naming them, and the poll's
    longest wait stays FRONTIER_POLL_MAX's."""
    caplog.set_level(logging.INFO)
    plain = SchedulerConfig.from_crawler(crawler_of(redis_url))
    caplog.clear()
    crawler = crawler_of(
        redis_url, REDIS_IDLE_BACKOFF_ENABLED="False", REDIS_IDLE_BACKOFF_MIN="7", REDIS_IDLE_BACKOFF_FACTOR="5"
    )
    lines = [r for r in caplog.records if "REDIS_IDLE_BACKOFF" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (
            logging.INFO,
            "scrapy-frontier: REDIS_IDLE_BACKOFF_ENABLED, REDIS_IDLE_BACKOFF_MIN, REDIS_IDLE_BACKOFF_FACTOR not used: "
            f"an idle worker's polls back off from 50 ms, doubling, up to FRONTIER_POLL_MAX={plain.poll_max} seconds",
        )
    ]
    config = SchedulerConfig.from_crawler(crawler)
    assert config.poll_max == plain.poll_max and not failed_at_open(crawler)
