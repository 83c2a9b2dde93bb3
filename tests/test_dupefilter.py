"""The shared dupefilter's layouts, fingerprinter check and ``scrapy forget``, on the real Redis
and with real ``scrapy crawl`` processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import time

import pytest
import redis.asyncio
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter

from scrapy_frontier.dupefilter import (
    DedupConfig,
    Dupefilter,
    DupefilterMismatch,
    bloom_size,
    claim,
)
from scrapy_frontier.keys import Keys
from tests.test_commands import run as run_command

KEYS = Keys.for_spider(Settings(), "site")
DISTRIBUTED = {"MAX_IDLE_TIME_BEFORE_CLOSE": "3"}


def fingerprints(prefix: str, n: int) -> list[str]:
    return [hashlib.sha1(f"{prefix}{i}".encode()).hexdigest() for i in range(n)]


def add_all(dupefilter: Dupefilter, fps: list[str], now: int = 0) -> list[int]:
    out: list[int] = []
    for i in range(0, len(fps), 500):
        out += dupefilter.add(fps[i : i + 500], now)
    return out


def test_bloom_chain_grows_and_keeps_every_fingerprint(redis_client):
    config = DedupConfig(mode="bloom", capacity=2000, error_rate=1e-6)
    bloom = Dupefilter(redis_client, KEYS, config)
    seen = fingerprints("seen", 7000)
    assert add_all(bloom, seen) == [1] * 7000
    assert add_all(bloom, seen) == [0] * 7000, "a fingerprint was lost"
    layout = {k.decode(): int(float(v)) for k, v in redis_client.hgetall(KEYS.bloom).items()}
    # 2000 + 4000 filled, the third (8000) holds the last 1000
    assert (layout["n"], layout["count"], layout["0:count"], layout["1:count"], layout["2:count"]) == (
        3,
        7000,
        2000,
        4000,
        1000,
    )
    assert (layout["0:bits"], layout["0:k"]) == bloom_size(2000, 1e-6 / 2)
    fresh = add_all(bloom, fingerprints("fresh", 20000))
    # the chain's rate is below 1e-6: among 20,000 new fingerprints, none should look seen
    assert sum(fresh) == 20000


def test_bloom_memory_is_bits_not_fingerprints(redis_client):
    config = DedupConfig(mode="bloom", capacity=50_000, error_rate=1e-6)
    add_all(Dupefilter(redis_client, KEYS, config), fingerprints("m", 20_000))
    used = sum(redis_client.memory_usage(k) or 0 for k in redis_client.scan_iter(match=KEYS.bloom + ":*"))
    bits, _ = bloom_size(50_000, 0.5e-6)
    assert bits / 8 <= used < bits / 8 * 1.1


def test_exact_set_is_scrapy_redis_compatible(redis_client):
    exact = Dupefilter(redis_client, KEYS, DedupConfig(mode="set"))
    fps = fingerprints("e", 10)
    assert exact.add(fps + fps[:3], 0) == [1] * 10 + [0] * 3
    assert redis_client.type(KEYS.dupefilter) == b"set"
    assert redis_client.smembers(KEYS.dupefilter) == {f.encode() for f in fps}


def test_recrawl_age_lets_old_fingerprints_through(redis_client):
    aged = Dupefilter(redis_client, KEYS, DedupConfig(recrawl_age=60))
    fp = fingerprints("a", 1)
    assert aged.add(fp, 1_000_000) == [1]
    assert aged.add(fp, 1_000_000 + 59_999) == [0]
    assert aged.add(fp, 1_000_000 + 60_001) == [1]  # older than the age: queued again
    assert aged.add(fp, 1_000_000 + 60_002) == [0]  # ... and its age starts over
    assert redis_client.zscore(KEYS.dupefilter, fp[0]) == 1_060_001


@pytest.mark.parametrize(
    "config",
    [DedupConfig(), DedupConfig(mode="set"), DedupConfig(recrawl_age=3600), DedupConfig(mode="bloom", capacity=100)],
)
def test_forget_lets_a_fingerprint_through_once(config, redis_client):
    dupefilter = Dupefilter(redis_client, KEYS, config)
    fps = fingerprints("f", 5)
    dupefilter.add(fps, 10)
    dupefilter.forget(fps[:2])
    assert dupefilter.add(fps, 20) == [1, 1, 0, 0, 0]
    assert dupefilter.add(fps, 30) == [0] * 5


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"DUPEFILTER_MODE": "cuckoo"}, "DUPEFILTER_MODE='cuckoo': must be one of exact, set, bloom"),
        (
            {"DUPEFILTER_MODE": "bloom", "DUPEFILTER_RECRAWL_AGE": "60"},
            "DUPEFILTER_RECRAWL_AGE needs DUPEFILTER_MODE=exact",
        ),
        ({"DUPEFILTER_BLOOM_ERROR_RATE": "2"}, "DUPEFILTER_BLOOM_ERROR_RATE=2.0: must be between 0 and 1"),
        ({"DUPEFILTER_BLOOM_CAPACITY": "many"}, "DUPEFILTER_BLOOM_CAPACITY='many' is not a valid int"),
        ({"DUPEFILTER_BLOOM_CAPACITY": "inf"}, "DUPEFILTER_BLOOM_CAPACITY='inf' is not a valid int"),
        (
            {"DUPEFILTER_RECRAWL_AGE": "inf"},
            "DUPEFILTER_RECRAWL_AGE='inf' is not a valid float: a finite number is needed",
        ),
    ],
)
def test_bad_dedup_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        DedupConfig.from_settings(Settings(settings))


class OtherFingerprinter(RequestFingerprinter):
    def fingerprint(self, request):
        return hashlib.sha1(super().fingerprint(request)).digest()


def test_claim_records_the_fingerprinter_and_refuses_another(redis_url, redis_client):
    async def go():
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            assert await claim(client, KEYS, DedupConfig(), RequestFingerprinter()) is True
            assert await claim(client, KEYS, DedupConfig(), RequestFingerprinter()) is False
            with pytest.raises(
                DupefilterMismatch, match="written by fingerprinter scrapy.utils.request.RequestFingerprinter"
            ):
                await claim(client, KEYS, DedupConfig(), OtherFingerprinter())
            with pytest.raises(DupefilterMismatch, match="is in layout 'packed', but this worker is set for 'bloom'"):
                await claim(client, KEYS, DedupConfig(mode="bloom"), RequestFingerprinter())
        finally:
            await client.aclose()

    asyncio.run(go())


def test_claim_adopts_a_scrapy_redis_dupefilter_of_the_same_layout(redis_url, redis_client):
    redis_client.sadd(KEYS.dupefilter, "a" * 40)

    async def go():
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            with pytest.raises(DupefilterMismatch, match="layout 'set'"):
                await claim(client, KEYS, DedupConfig(recrawl_age=10), RequestFingerprinter())
            assert await claim(client, KEYS, DedupConfig(), RequestFingerprinter()) is True
        finally:
            await client.aclose()

    asyncio.run(go())
    assert redis_client.hget(KEYS.dupefilter_meta, "fingerprinter") == b"scrapy.utils.request.RequestFingerprinter"


def test_bloom_crawl_fetches_every_page_once(tutorial_site, start_worker, redis_url, redis_client, tmp_path):
    site, expected = tutorial_site
    db = tmp_path / "crawl.sqlite3"
    settings = {
        **DISTRIBUTED,
        "DUPEFILTER_MODE": "bloom",
        "DUPEFILTER_BLOOM_CAPACITY": "4",
        "SCHEDULER_PERSIST": "True",
        "SQLITE_PATH": str(db),
    }
    workers = [start_worker(settings=settings, env={"REDIS_URL": redis_url}) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{site.url}tutorial/index.html")
    for w in workers:
        assert w.wait() == 0, w.output[-3000:]
    urls = [row[0] for row in sqlite3.connect(db).execute("SELECT url FROM pages WHERE status = 200")]
    assert sorted(urls) == sorted(expected)
    assert sum(w.stat("item_scraped_count") for w in workers) == len(expected)  # each page once
    layout = redis_client.hgetall(KEYS.bloom)
    assert int(layout[b"n"]) >= 3, "the chain never grew"  # 4 + 8 < the URLs queued
    assert redis_client.exists(KEYS.dupefilter) == 0  # no set beside the filter
    status = json.loads(run_command(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
    assert status["dupefilter_size"] == int(layout[b"count"]) >= len(expected)


def test_worker_refuses_a_dupefilter_of_another_fingerprinter(start_worker, redis_url, redis_client):
    redis_client.hset(
        KEYS.dupefilter_meta, mapping={"fingerprinter": "old.Fingerprinter", "probe": "0" * 40, "layout": "set"}
    )
    worker = start_worker(settings=DISTRIBUTED, env={"REDIS_URL": redis_url})
    assert worker.wait() == 1
    assert "was written by fingerprinter old.Fingerprinter" in worker.output
    assert "Traceback" not in worker.output
    assert redis_client.hget(KEYS.dupefilter_meta, "probe") == b"0" * 40  # left as it was


@pytest.mark.slow
def test_forget_command_recrawls_a_page(docs_site, start_worker, redis_url, redis_client, tmp_path):
    db = tmp_path / "crawl.sqlite3"
    settings = {**DISTRIBUTED, "SCHEDULER_PERSIST": "True", "SQLITE_PATH": str(db), "DEPTH_LIMIT": "1"}
    start = f"{docs_site.url}library/json.html"
    first = start_worker(settings=settings, env={"REDIS_URL": redis_url})
    first.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", start)
    assert first.wait() == 0
    crawled = first.stat("response_received_count")
    assert crawled > 3
    env = {"REDIS_URL": redis_url}
    # pushed again without forgetting: the dupefilter refuses it
    second = start_worker(settings=settings, env=env)
    second.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", start)
    assert second.wait() == 0
    assert second.stat("response_received_count") == 0
    done = run_command(["forget", "site", start, "--pattern", f"{docs_site.url}library/json*", "--push", "--json"], env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["forgotten"], result["known"], result["pushed"], result["layout"]) == (1, 1, 1, "packed")
    bad = run_command(["forget", "site", "ftp://nope/"], env)
    assert bad.returncode == 1 and "ftp://nope/" in bad.stdout
    third = start_worker(settings=settings, env=env)
    assert third.wait() == 0
    assert third.stat("response_received_count") == 1  # that page only: its links are still seen


def test_a_running_worker_fetches_a_forgotten_url_again(docs_site, start_worker, redis_url, redis_client, tmp_path):
    """The worker's local first look holds every URL it queued; `scrapy forget` makes it ask
    Redis again (at its next heartbeat), so a page that links to the forgotten URL queues it."""
    out = tmp_path / "items.jsonl"
    index = f"{docs_site.url}index.html"
    settings = {
        **DISTRIBUTED,
        "DOMAIN_RATE_LIMIT": "25",
        "FRONTIER_HEARTBEAT_INTERVAL": "0.5",
        "FEEDS": json.dumps({str(out): {"format": "jsonlines"}}),
    }
    worker = start_worker(settings=settings, env={"REDIS_URL": redis_url})
    worker.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", index)
    deadline = time.monotonic() + 60
    while int(redis_client.get("site:dupefilter:count") or 0) < 50:  # index.html crawled, its links queued
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.output[-2000:]
        time.sleep(0.1)
    done = run_command(["forget", "site", index], {"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert worker.wait() == 0
    urls = [json.loads(line)["url"] for line in out.read_text().splitlines()]
    assert urls.count(index) == 2, urls.count(index)
    assert "the local first look is emptied" in worker.output


def test_forget_refuses_without_a_dupefilter(redis_url):
    done = run_command(["forget", "site", "http://h/"], {"REDIS_URL": redis_url})
    assert done.returncode == 2 and "is empty" in done.stderr
