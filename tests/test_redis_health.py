"""Redis trouble seen from a worker, against real throwaway redis-servers: a Redis at maxmemory
(noeviction) and an unreachable one, each reported once (scrapy_frontier/redis_health.py), and
what the frontier's scripts still do at maxmemory."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
import redis
import redis.asyncio
from scrapy.settings import Settings

from scrapy_frontier import redis_health
from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.nodes import Heartbeat
from scrapy_frontier.redis_health import RedisHealth

KEYS = Keys.for_spider(Settings(), "site")


def entry(url: str) -> Entry:
    return Entry(url, "h", 0, json.dumps({"url": url}))


def refused(client: redis.Redis) -> redis.exceptions.OutOfMemoryError:
    with pytest.raises(redis.exceptions.OutOfMemoryError) as caught:
        client.set("site:probe", "x")
    return caught.value


def test_at_maxmemory_the_heartbeat_beats_acks_pass_and_a_push_is_refused_whole(throwaway_redis):
    """A page's lease is acknowledged only with its links queued: at maxmemory the push of new
    links is refused as a whole (nothing written, the lease kept), an acknowledgement alone
    passes (it frees memory), and the heartbeat goes on (allow-oom), so no live worker is taken
    for dead once memory is raised."""
    server = throwaway_redis(**{"maxmemory-policy": "noeviction"})
    url = f"redis://127.0.0.1:{server.port}/0"
    sync = redis.Redis.from_url(url)
    heartbeat = Heartbeat(sync, KEYS, "n1", interval=1, timeout=10, info=lambda: {"pages": 1})
    heartbeat.beat()

    async def go():
        client = redis.asyncio.Redis.from_url(url)
        frontier = Frontier(client, KEYS, "n1")
        try:
            await frontier.push([entry("a"), entry("b")])
            taken = await frontier.lease(2)
            sync.config_set("maxmemory", 1)
            seen = await client.scard(KEYS.dupefilter)
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                await frontier.push([entry("c")], acks=[taken[0]])
            kept = (
                await client.hlen(frontier.lease_key) - await client.hexists(frontier.lease_key, "@"),
                await client.scard(KEYS.dupefilter),
            )
            await frontier.push([], acks=[taken[0]])
            return seen, kept, await client.hlen(frontier.lease_key) - await client.hexists(frontier.lease_key, "@")
        finally:
            sync.config_set("maxmemory", 0)
            await client.aclose()

    before = sync.zscore(KEYS.nodes, "n1")
    seen, kept, left = asyncio.run(go())
    assert kept == (2, seen)  # the refused push wrote nothing: the lease stays, "c" is not seen
    assert left == 1
    sync.config_set("maxmemory", 1)
    time.sleep(0.01)
    heartbeat.beat()
    assert sync.zscore(KEYS.nodes, "n1") > before
    assert sync.hget(KEYS.node_info("n1"), "pages") == b"1"
    sync.config_set("maxmemory", 0)
    sync.close()


def test_a_redis_out_of_memory_is_one_line_with_its_figures_and_one_when_it_accepts_writes(
    throwaway_redis, caplog, monkeypatch
):
    """Writes near the limit pass and fail in turn: one episode, one ERROR line naming Redis's
    used and maximum memory, and one line once Redis has room and refused nothing for a while."""
    monkeypatch.setattr(redis_health, "QUIET_SECONDS", 1.0)
    monkeypatch.setattr(redis_health, "PROBE_SECONDS", 0.1)
    server = throwaway_redis(**{"maxmemory-policy": "noeviction"})
    client = redis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0")
    health = RedisHealth(Settings({"REDIS_URL": f"redis://127.0.0.1:{server.port}/0"}))
    caplog.set_level(logging.INFO, logger="scrapy_frontier")
    try:
        client.config_set("maxmemory", 1)
        assert health.failed(refused(client))
        client.config_set("maxmemory", 0)
        client.set("site:probe", "x")  # a write passes...
        health.answered()
        client.config_set("maxmemory", 1)
        assert health.failed(refused(client))  # ...and the next is refused: the same episode
        time.sleep(1.5)
        assert health.state == redis_health.OUT_OF_MEMORY  # still over maxmemory: not over yet
        client.config_set("maxmemory", 256 << 20)
        deadline = time.monotonic() + 10
        while health.state is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        health.close()
        client.config_set("maxmemory", 0)
        client.close()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "scrapy_frontier.redis_health"]
    assert len(lines) == 2, lines
    (level, error), (_, back) = lines
    assert level == "ERROR" and error.startswith("Redis refuses writes: it is out of memory (used_memory ")
    assert ", maxmemory 1 B, maxmemory-policy noeviction)" in error and "CONFIG SET maxmemory" in error
    assert back.startswith("Redis accepts writes again after ") and "maxmemory 256.0 MiB" in back


def test_an_outage_is_one_line_and_one_when_redis_answers(throwaway_redis, caplog, monkeypatch):
    monkeypatch.setattr(redis_health, "SETTLE_SECONDS", 0.5, raising=False)
    server = throwaway_redis()
    client = redis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0")
    health = RedisHealth()
    caplog.set_level(logging.INFO, logger="scrapy_frontier")
    server.stop()
    for _ in range(3):
        with pytest.raises(redis.exceptions.ConnectionError) as caught:
            client.ping()
        assert health.failed(caught.value)
        # A reply read just after the error (to a call sent before Redis went away, from another
        # component) is no recovery: it would report "reachable again", then a second outage.
        health.answered()
    assert health.state == redis_health.UNREACHABLE
    assert not health.failed(redis.exceptions.ResponseError("WRONGTYPE"))  # not an outage: the caller's
    server.start()
    time.sleep(0.6)
    client.ping()
    health.answered()
    health.answered()
    client.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "scrapy_frontier.redis_health"]
    assert (
        len(lines) == 2
        and lines[0].startswith("Redis unreachable (ConnectionError: ")
        and lines[1].startswith("Redis is reachable again after ")
    ), lines
