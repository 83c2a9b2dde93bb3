"""A scrapy-redis crawl in progress, continued by scrapy-frontier on the same Redis: its queue
adopted, its dupefilter read with scrapy-redis's fingerprint (``scrapy_frontier/adopt.py``).

The crawl in progress is written by scrapy-redis 0.9.1 itself: a real ``scrapy crawl`` with its
scheduler and dupefilter, stopped after a few pages with requests queued, or, in-process, its own
queue and dupefilter classes."""

import base64
import json
import sqlite3

import pytest
import redis
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler
from scrapy_redis.dupefilter import RFPDupeFilter
from scrapy_redis.queue import FifoQueue, PriorityQueue

from scrapy_frontier.addon import DistributedAddon
from tests.servers import queued_requests
from tests.test_scheduler_parts import ProbeSpider, join_once

SCRAPY_REDIS = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": "True",
}


@pytest.mark.parametrize(
    "queue",
    [
        {},
        {"SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"},
        {"SCHEDULER_SERIALIZER": "tests.scrapy_redis_json"},
    ],
    ids=["priority-pickle", "fifo-pickle", "priority-json"],
)
@pytest.mark.core
def test_a_scrapy_redis_crawl_in_progress_goes_on_losing_nothing_and_fetching_nothing_twice(
    queue, tutorial_site, start_worker, redis_url, redis_client, tmp_path
):
    site, expected = tutorial_site
    settings = {**SCRAPY_REDIS, **queue}
    # scrapy-redis alone (no add-on, so REDIS_URL as a setting), one request at a time, stopped
    # after 5 pages: requests queued.
    first = start_worker(
        settings={
            **settings,
            "ADDONS": "{}",
            "REDIS_URL": redis_url,
            "CLOSESPIDER_PAGECOUNT": "5",
            "CONCURRENT_REQUESTS": "1",
        },
        args=["-a", f"url={site.url}tutorial/index.html", "-o", f"{tmp_path}/first.jl"],
    )
    assert first.wait() == 0, first.output[-3000:]
    kind = redis_client.type("site:requests")
    queued = redis_client.zcard("site:requests") if kind == b"zset" else redis_client.llen("site:requests")
    assert kind == (b"list" if queue.get("SCHEDULER_QUEUE_CLASS") else b"zset") and queued > 10
    fetched_first = set(site.fetches()) - {"/robots.txt"}
    assert len(fetched_first) >= 3

    # The same settings with the add-on, as the README says; two workers join at once.
    workers = [
        start_worker(settings={**settings, "MAX_IDLE_TIME_BEFORE_CLOSE": "2"}, env={"REDIS_URL": redis_url})
        for _ in range(2)
    ]
    for w in workers:
        assert w.wait() == 0, w.output[-3000:]
    logs = "".join(w.output for w in workers)
    assert logs.count("Adopted the scrapy-redis crawl 'site'") == 1
    assert f"{queued} queued requests moved from site:requests into the frontier" in logs
    assert "written by scrapy_redis.dupefilter.RFPDupeFilter" in logs

    fetches = site.fetches()
    twice = {path: n for path, n in fetches.items() if n > 1 and path != "/robots.txt"}
    assert twice == {}, "fetched again after the switch"
    first_items = [json.loads(line)["url"] for line in (tmp_path / "first.jl").read_text().splitlines()]
    db = sqlite3.connect(tmp_path / "crawl.sqlite3")
    stored = [row[0] for row in db.execute("SELECT url FROM pages")]
    assert sorted(first_items + stored) == sorted(expected)  # every page stored once, none lost


def spider_of(redis_url, **settings):
    crawler = get_crawler(ProbeSpider, {"REDIS_URL": redis_url, "ADDONS": {DistributedAddon: 0}, **settings})
    spider = ProbeSpider()
    spider.crawler = crawler
    spider.settings = crawler.settings
    return crawler, spider


def test_an_unreadable_request_is_kept_with_its_bytes_and_the_rest_is_moved(redis_url, redis_client):
    crawler, spider = spider_of(redis_url)
    queue = PriorityQueue(redis_client, spider, "probe:requests")
    dupefilter = RFPDupeFilter(redis_client, "probe:dupefilter")
    for i in range(3):
        request = Request(f"http://127.0.0.9/{i}", priority=i)
        assert not dupefilter.request_seen(request)
        queue.push(request)
    garbage = b"\x80\x05not a pickle"
    redis_client.zadd("probe:requests", {garbage: 0})

    session = join_once(crawler)
    assert session is not None
    assert queued_requests(redis_client, b"probe:requests:") == 3
    assert not redis_client.exists("probe:scrapy-redis:requests", "probe:scrapy-redis:adopting")
    (record,) = [json.loads(r) for r in redis_client.lrange("probe:scrapy-redis:invalid", 0, -1)]
    assert base64.b64decode(record["payload_base64"]) == garbage and record["reason"] == "scrapy_redis_request"
    assert crawler.stats.get_value("frontier/adopted") == 3
    assert crawler.stats.get_value("frontier/adopted/refused") == 1
    # the crawl goes on with scrapy-redis's fingerprint: a queued URL is a duplicate, a new one is not
    theirs = session.fingerprinter.fingerprint(Request("http://127.0.0.9/1")).hex()
    assert redis_client.sismember("probe:dupefilter", theirs)
    assert redis_client.hget("probe:dupefilter:meta", "fingerprinter") == b"scrapy_redis.dupefilter.RFPDupeFilter"


def test_a_second_join_does_not_move_anything_again(redis_url, redis_client):
    crawler, spider = spider_of(redis_url, SCHEDULER_QUEUE_CLASS="scrapy_redis.queue.FifoQueue")
    queue = FifoQueue(redis_client, spider, "probe:requests")
    for i in range(4):
        queue.push(Request(f"http://127.0.0.9/{i}"))
    assert join_once(crawler) is not None
    assert join_once(crawler, node="n2") is not None
    assert queued_requests(redis_client, b"probe:requests:") == 4
    assert crawler.stats.get_value("frontier/adopted") == 4


def test_a_dupefilter_written_with_scrapys_fingerprint_is_read_with_it(redis_url, redis_client):
    crawler, spider = spider_of(redis_url)
    queue = PriorityQueue(redis_client, spider, "probe:requests")
    scrapys = RequestFingerprinter()
    for i in range(3):
        request = Request(f"http://127.0.0.9/{i}")
        redis_client.sadd("probe:dupefilter", scrapys.fingerprint(request).hex())
        queue.push(request)
    session = join_once(crawler)
    assert session is not None
    assert redis_client.hget("probe:dupefilter:meta", "fingerprinter") == b"scrapy.utils.request.RequestFingerprinter"


def test_a_move_cut_short_is_finished_by_the_next_worker_without_queueing_twice(redis_url, redis_client):
    crawler, spider = spider_of(redis_url)
    queue = PriorityQueue(redis_client, spider, "probe:requests")
    for i in range(5):
        queue.push(Request(f"http://127.0.0.9/{i}"))
    originals = dict(redis_client.zrange("probe:requests", 0, -1, withscores=True))
    assert join_once(crawler) is not None
    assert queued_requests(redis_client, b"probe:requests:") == 5
    # As if the worker had died after queueing the batch and before deleting it from the renamed key.
    redis_client.zadd("probe:scrapy-redis:requests", originals)
    assert join_once(crawler, node="n2") is not None
    assert queued_requests(redis_client, b"probe:requests:") == 5
    assert not redis_client.exists("probe:scrapy-redis:requests")


def test_nothing_to_adopt_changes_nothing(redis_url, redis_client):
    crawler, _ = spider_of(redis_url)
    assert join_once(crawler) is not None
    assert redis_client.hget("probe:dupefilter:meta", "fingerprinter") == b"scrapy.utils.request.RequestFingerprinter"
    assert not redis_client.exists("probe:scrapy-redis:requests", "probe:scrapy-redis:invalid")


def test_an_adoption_lock_held_by_a_live_worker_is_waited_for(redis_url, redis_client):
    crawler, spider = spider_of(redis_url)
    PriorityQueue(redis_client, spider, "probe:requests").push(Request("http://127.0.0.9/x"))
    redis_client.set("probe:scrapy-redis:adopting", "other-node", ex=1)

    session = join_once(crawler)  # waits about a second for the lock to expire, then adopts
    assert session is not None
    assert queued_requests(redis_client, b"probe:requests:") == 1


def test_a_scrapy_redis_worker_still_running_is_refused_and_nothing_moved(redis_url, redis_client, caplog):
    """A scrapy-redis worker left running would pop from the frontier's index once the queue is
    moved: the first worker with the add-on sees the crawl change and stops with one line."""
    import threading

    crawler, spider = spider_of(redis_url)
    PriorityQueue(redis_client, spider, "probe:requests").push(Request("http://127.0.0.9/x"))
    stop = threading.Event()

    def scrapy_redis_worker():
        dupefilter = RFPDupeFilter(redis.Redis.from_url(redis_url), "probe:dupefilter")
        i = 0
        while not stop.wait(0.2):
            dupefilter.request_seen(Request(f"http://127.0.0.9/{i}"))
            i += 1

    thread = threading.Thread(target=scrapy_redis_worker)
    thread.start()
    try:
        with caplog.at_level("ERROR"):
            assert join_once(crawler) is None
    finally:
        stop.set()
        thread.join()
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "a scrapy-redis worker is still crawling it" in line and "stop every scrapy-redis worker" in line
    assert redis_client.type("probe:requests") == b"zset" and redis_client.zcard("probe:requests") == 1
    assert not redis_client.exists(
        "probe:scrapy-redis:requests", "probe:scrapy-redis:adopting", "probe:dupefilter:meta"
    )
