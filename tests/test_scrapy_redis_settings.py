"""Each scrapy-redis setting's fate (docs/spiders.md, "scrapy-redis settings"): honoured (its
behaviour observed on the real Redis), mapped (the effective value), or refused (one error line
and exit status 2 of a real ``scrapy crawl``)."""

from __future__ import annotations

import asyncio
import base64
import logging
import sqlite3
import time

import pytest
import redis
from scrapy import Spider
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler

from scrapy_frontier.addon import DistributedAddon
from scrapy_frontier.config import failed_at_open
from scrapy_frontier.connection import async_redis, sync_redis
from scrapy_frontier.scheduler.config import SchedulerConfig
from scrapy_frontier.scheduler.start_urls import StartUrlIntake
from tests.conftest import REDIS_DB, REDIS_HOST, REDIS_PORT, scrapy_command
from tests.test_scheduler_parts import join_once

ADDON = {DistributedAddon: 0}


class ProbeSpider(Spider):
    name = "probe"


class KeysInOrderSpider(ProbeSpider):
    redis_key = ["probe:high", "probe:low"]


@pytest.fixture(autouse=True)
def no_environment(monkeypatch):
    for name in ("REDIS_URL", "MYSQL_URL"):
        monkeypatch.delenv(name, raising=False)


def crawler_of(spidercls=ProbeSpider, **settings):
    return get_crawler(spidercls, {"ADDONS": ADDON, **settings})


def messages(caplog, level=logging.INFO):
    return [r.getMessage() for r in caplog.records if r.levelno == level]


# -- REDIS_HOST / REDIS_PORT / REDIS_DB, scrapy-redis's scheduler ------------------------------


def test_redis_host_port_db_without_redis_url_are_the_crawls_redis(redis_url, redis_client, caplog):
    caplog.set_level(logging.INFO)
    crawler = crawler_of(REDIS_HOST=REDIS_HOST, REDIS_PORT=str(REDIS_PORT), REDIS_DB=REDIS_DB)
    settings = crawler.settings
    assert settings["REDIS_URL"] == redis_url
    assert settings["SCHEDULER"] == "scrapy_frontier.scheduler.FrontierScheduler"
    assert any(m.startswith(f"scrapy-frontier: distributed crawl on {redis_url}") for m in messages(caplog))
    client = sync_redis(settings)
    client.set("probe:written", "here")
    client.close()
    assert redis_client.get("probe:written") == b"here"  # the database REDIS_DB names
    # REDIS_URL wins when both are set
    both = crawler_of(REDIS_URL="redis://127.0.0.1:6379/9", REDIS_HOST="elsewhere", REDIS_PORT="1")
    assert both.settings["REDIS_URL"] == "redis://127.0.0.1:6379/9"
    # an empty REDIS_URL (REDIS_URL = os.environ.get("REDIS_URL", "") in settings.py) is no REDIS_URL
    empty = crawler_of(
        REDIS_URL="", REDIS_HOST=REDIS_HOST, REDIS_PORT=str(REDIS_PORT), SCHEDULER="scrapy_redis.scheduler.Scheduler"
    )
    assert empty.settings["REDIS_URL"] == f"redis://{REDIS_HOST}:{REDIS_PORT}/0"
    assert empty.settings["SCHEDULER"] == "scrapy_frontier.scheduler.FrontierScheduler"


def test_a_password_in_redis_params_is_used_and_never_logged(caplog):
    caplog.set_level(logging.INFO)
    crawler = crawler_of(REDIS_HOST="127.0.0.1", REDIS_PARAMS={"password": "s3cret"})
    assert crawler.settings["REDIS_URL"] == "redis://127.0.0.1:6379/0"
    assert sync_redis(crawler.settings).connection_pool.connection_kwargs["password"] == "s3cret"
    assert "s3cret" not in caplog.text


def test_scrapy_redis_scheduler_alone_connects_to_redis_pys_default_redis(caplog):
    caplog.set_level(logging.INFO)
    crawler = crawler_of(SCHEDULER="scrapy_redis.scheduler.Scheduler")
    assert crawler.settings["REDIS_URL"] == "redis://localhost:6379/0"
    assert crawler.settings["SCHEDULER"] == "scrapy_frontier.scheduler.FrontierScheduler"
    assert any("SCHEDULER=scrapy_redis.scheduler.Scheduler without REDIS_URL" in m for m in messages(caplog))


def test_commands_use_redis_host_port_db_too(redis_url, redis_client):
    result = scrapy_command(
        [
            "push",
            "site",
            "http://127.0.0.9/a",
            "-s",
            f"REDIS_HOST={REDIS_HOST}",
            "-s",
            f"REDIS_PORT={REDIS_PORT}",
            "-s",
            f"REDIS_DB={REDIS_DB}",
        ],
        {},
    )
    assert result.returncode == 0, result.stderr
    assert redis_client.lrange("site:start_urls", 0, -1) == [b"http://127.0.0.9/a"]


# -- STATS_CLASS, REDIS_IDLE_BACKOFF_* ----------------------------------------------------------


def test_scrapy_redis_stats_collector_is_replaced_by_scrapys(redis_url, caplog):
    caplog.set_level(logging.INFO)
    crawler = crawler_of(REDIS_URL=redis_url, STATS_CLASS="scrapy_redis.stats.RedisStatsCollector")
    assert crawler.settings["STATS_CLASS"] == "scrapy.statscollectors.MemoryStatsCollector"
    assert any("STATS_CLASS scrapy_redis.stats.RedisStatsCollector replaced" in m for m in messages(caplog))


def test_idle_backoff_max_is_frontier_poll_max_unless_that_is_set(redis_url, caplog):
    caplog.set_level(logging.INFO)
    mapped = crawler_of(REDIS_URL=redis_url, REDIS_IDLE_BACKOFF_MAX="3", REDIS_IDLE_BACKOFF_FACTOR="1.5")
    assert SchedulerConfig.from_crawler(mapped).poll_max == 3.0
    assert any(m.startswith("scrapy-frontier: REDIS_IDLE_BACKOFF_FACTOR not used") for m in messages(caplog))
    own = crawler_of(REDIS_URL=redis_url, REDIS_IDLE_BACKOFF_MAX="3", FRONTIER_POLL_MAX="2")
    assert SchedulerConfig.from_crawler(own).poll_max == 2.0


# -- REDIS_PROTOCOL, REDIS_MAX_CONNECTIONS ------------------------------------------------------


def test_redis_protocol_is_the_clients_protocol(redis_url):
    # redis-py 8 speaks RESP3 by default; scrapy-redis's users may pin RESP2
    crawler = crawler_of(REDIS_URL=redis_url, REDIS_PROTOCOL="2")
    client = sync_redis(crawler.settings)
    assert b" resp=2" in client.execute_command("CLIENT", "INFO")
    client.close()


def test_redis_max_connections_bounds_the_pool_and_calls_wait(redis_url):
    crawler = crawler_of(REDIS_URL=redis_url, REDIS_MAX_CONNECTIONS="2")

    async def six_blocking_pops() -> float:
        client = async_redis(crawler.settings)
        started = time.monotonic()
        await asyncio.gather(*(client.blpop(["probe:nothing"], timeout=0.3) for _ in range(6)))
        elapsed = time.monotonic() - started
        await client.aclose()
        return elapsed

    assert asyncio.run(six_blocking_pops()) >= 0.85  # two at a time: three rounds of 0.3 s


# -- REDIS_ENCODING --------------------------------------------------------------------------


def test_redis_encoding_decodes_start_urls_and_a_dead_letter_keeps_the_payload_as_pushed(redis_url):
    crawler = crawler_of(REDIS_URL=redis_url, REDIS_ENCODING="latin-1")
    config = SchedulerConfig.from_crawler(crawler)
    assert config.encoding == "latin-1"
    intake = StartUrlIntake(ProbeSpider(), StatsCollector(crawler), "n1", 1000, config.encoding)
    requests, refused = intake.requests("http://127.0.0.9/caf\u00e9".encode("latin-1"))
    assert refused is None and requests[0].url == "http://127.0.0.9/caf%C3%A9"
    _, refused = intake.requests("ftp://127.0.0.9/caf\u00e9".encode("latin-1"))
    assert refused is not None and refused["payload"] == "ftp://127.0.0.9/caf\u00e9"
    # UTF-8 (the default): bytes that are not UTF-8 are kept as bytes, not as U+FFFD
    utf8 = StartUrlIntake(ProbeSpider(), StatsCollector(crawler), "n1", 1000)
    _, refused = utf8.requests(b"http://127.0.0.9/\xff\xfe")
    assert refused is not None and refused["reason"] == "not_utf8" and "payload" not in refused
    assert base64.b64decode(refused["payload_base64"]) == b"http://127.0.0.9/\xff\xfe"


# -- SCHEDULER_FLUSH_ON_START -----------------------------------------------------------------


def test_flush_on_start_clears_a_crawl_without_live_workers_but_not_the_start_urls(redis_url, redis_client, caplog):
    caplog.set_level(logging.INFO)
    join_once(crawler_of(REDIS_URL=redis_url), node="old")
    epoch = redis_client.hget("probe:dupefilter:meta", "epoch")
    redis_client.zadd("probe:nodes", {"old": 0})  # its last beat long ago: dead
    redis_client.zadd("probe:requests", {"127.0.0.9": 0})
    redis_client.rpush("probe:requests:127.0.0.9#0", "{}")
    redis_client.hset("probe:leases:old", "start:http://127.0.0.9/x", "\t")
    redis_client.lpush("probe:start_urls", "http://127.0.0.9/")
    join_once(crawler_of(REDIS_URL=redis_url, SCHEDULER_FLUSH_ON_START=True), node="new")
    assert not redis_client.exists("probe:requests", "probe:requests:127.0.0.9#0", "probe:leases:old")
    assert redis_client.hget("probe:dupefilter:meta", "epoch") != epoch  # a new crawl
    assert redis_client.lrange("probe:start_urls", 0, -1) == [b"http://127.0.0.9/"]
    assert [n for n, _ in redis_client.zrange("probe:nodes", 0, -1, withscores=True)] == [b"new"]
    assert any(m.startswith("SCHEDULER_FLUSH_ON_START: no other live worker: cleared") for m in messages(caplog))


def test_flush_on_start_clears_nothing_while_a_worker_is_live(redis_url, redis_client, caplog):
    caplog.set_level(logging.INFO)
    join_once(crawler_of(REDIS_URL=redis_url), node="live")  # its beat is now
    redis_client.zadd("probe:requests", {"127.0.0.9": 0})
    join_once(crawler_of(REDIS_URL=redis_url, SCHEDULER_FLUSH_ON_START=True), node="new")
    assert redis_client.exists("probe:requests")
    assert "SCHEDULER_FLUSH_ON_START: the crawl 'probe' has 1 live worker: joined as it is, nothing cleared" in (
        messages(caplog)
    )


# -- refused ---------------------------------------------------------------------------------


def test_a_list_of_start_url_keys_is_refused_in_one_line(redis_url, caplog):
    crawler = crawler_of(KeysInOrderSpider, REDIS_URL=redis_url)
    assert failed_at_open(crawler)
    assert messages(caplog, logging.ERROR) == [
        "KeysInOrderSpider.redis_key is a list of keys: not supported; use one start-URL key, with each payload's "
        'priority in JSON: {"url": "...", "priority": 10}'
    ]


REFUSED = [
    (
        {"REDIS_START_URLS_AS_ZSET": "True"},
        "REDIS_START_URLS_AS_ZSET is not supported: push start URLs to a list (lpush, or scrapy push), with their "
        'priority in a JSON payload: {"url": "...", "priority": 10}',
    ),
    (
        {"REDIS_KEY_CHECK_INTERVAL": "5"},
        "REDIS_KEY_CHECK_INTERVAL is not supported (a spider reads one start-URL key): remove it, and give payloads "
        'a priority in JSON instead of keys in order: {"url": "...", "priority": 10}',
    ),
    (
        {"REDIS_PARAMS": '{"redis_cls": "redis.Redis"}'},
        "REDIS_PARAMS['redis_cls'] is not supported: the client is redis-py's Redis, RedisCluster (REDIS_CLUSTER) "
        "or Sentinel primary, chosen from REDIS_URL; remove it",
    ),
    ({"REDIS_PORT": "six", "REDIS_HOST": REDIS_HOST}, "Setting REDIS_PORT='six' is not a valid int"),
]


@pytest.mark.parametrize(("settings", "line"), REFUSED, ids=[next(iter(s)) for s, _ in REFUSED])
def test_a_setting_that_cannot_work_stops_the_crawl_with_one_line(settings, line, start_worker, redis_url, tmp_path):
    env = {} if "REDIS_HOST" in settings else {"REDIS_URL": redis_url}
    worker = start_worker(settings=settings, env=env, args=["-a", "url=http://127.0.0.9:1/"])
    assert worker.wait(60) == 1, worker.output[-3000:]
    errors = [line.split(" ERROR: ", 1)[1] for line in worker.output.splitlines() if " ERROR: " in line]
    assert errors == [line], worker.output[-3000:]
    assert "Traceback" not in worker.output


def test_redis_protocol_2_crawls(tutorial_site, start_worker, redis_url, tmp_path):
    """RESP2 replies (flat lists where RESP3 has maps, sets and doubles) reach every part of a
    crawl: it stores every page."""
    site, expected = tutorial_site
    worker = start_worker(
        settings={"REDIS_PROTOCOL": "2", "MAX_IDLE_TIME_BEFORE_CLOSE": "1"},
        env={"REDIS_URL": redis_url},
        args=["-a", f"url={site.url}tutorial/index.html"],
    )
    assert worker.wait(60) == 0, worker.output[-3000:]
    with sqlite3.connect(tmp_path / "crawl.sqlite3") as db:
        stored = {row[0] for row in db.execute("SELECT url FROM pages")}
    assert stored == expected, worker.output[-3000:]
    assert redis.Redis.from_url(redis_url).exists("site:dupefilter") == 0  # finished and cleared
