"""Redis bytes per scheduled revisit, and Redis CPU per revisit scheduled and moved when due.

    python -m bench.revisit_memory [--pages 1000000] [--hosts 1000] [--interval 86400]

Starts a redis-server of its own and schedules ``--pages`` revisits over ``--hosts`` hosts,
each due in ``--interval`` seconds, through :meth:`Frontier.schedule
<scrapy_frontier.frontier.Frontier.schedule>`, each the request the revisit middleware writes
for a page of the ``site`` spider (a depth in meta, its revisit state with an ETag and a
Last-Modified), made into its record as the scheduler makes it. The bytes are ``used_memory``
after less before. Then it makes every page due (the wheel's bucket ends set to 0) and moves
them all into their hosts' queues (:meth:`Frontier.queue_due`), 500 a call. Prints one JSON
line: the bytes per scheduled page, and the Redis CPU (``INFO commandstats``, µs) per page
scheduled and per page moved.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import tempfile
from pathlib import Path

import redis
import redis.asyncio
from scrapy import Request
from scrapy.settings import Settings
from scrapy.spiders import Spider

from scrapy_frontier.frontier import Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.revisit import REVISIT_META, STATE_MARK, schedule_args
from scrapy_frontier.serialize import request_to_json
from tests.servers import RedisServer

BATCH = 1000


class _Spider(Spider):
    name = "bench"

    def parse(self, response):  # the default callback: not written
        pass


def page(spider: Spider, host: str, i: int, interval: float) -> tuple[str, list]:
    """Page ``i``'s revisit as the scheduler writes it: ``(host, schedule_args values)``."""
    state = {
        "interval": interval,
        "first_seen": 1796400000,
        "changed_at": None,
        "changes": 0,
        "hash": hashlib.sha256(str(i).encode()).hexdigest()[:16],
        "etag": f'"{i:x}-5f3a9c2b"',
        "last_modified": 1796300000 + i % 86400,
    }
    url = f"https://{host}/section/{i % 97}/article-{i}.html"
    request = Request(url, meta={"depth": 3, REVISIT_META: STATE_MARK}, dont_filter=True)
    fingerprint = hashlib.sha1(url.encode()).hexdigest()
    return host, schedule_args(request_to_json(request, spider), host, "0", fingerprint, interval, 0, state)


def cpu_us(sync: redis.Redis) -> float:
    return float(sum(v["usec"] for k, v in sync.info("commandstats").items() if k.startswith("cmdstat_evalsha")))


async def run(url: str, pages: int, hosts: int, interval: float) -> dict:
    client = redis.asyncio.Redis.from_url(url)
    sync = redis.Redis.from_url(url)
    keys = Keys.for_spider(Settings(), "bench")
    frontier = Frontier(client, keys, "bench-node")
    spider = _Spider()
    await frontier.schedule([])  # scripts loaded before the counts start
    before, cpu0 = sync.info("memory")["used_memory"], cpu_us(sync)
    for start in range(0, pages, BATCH):
        revisits = [
            page(spider, f"www.host{i % hosts}.example.com", i, interval)
            for i in range(start, min(pages, start + BATCH))
        ]
        await frontier.schedule(revisits)
    used, cpu1 = sync.info("memory")["used_memory"], cpu_us(sync)
    parts = sync.zrange(keys.shard(0).revisit_wheel, 0, -1)
    for j in range(0, len(parts), 1000):
        sync.zadd(keys.shard(0).revisit_wheel, dict.fromkeys(parts[j : j + 1000], 0))
    cpu1 = cpu_us(sync)
    moved = 0
    while True:
        n, _ = await frontier.queue_due(500)
        moved += n
        if not n:
            break
    cpu2 = cpu_us(sync)
    await client.aclose()
    return {
        "pages": pages,
        "hosts": hosts,
        "schedule_bytes": used - before,
        "bytes_per_page": round((used - before) / pages, 1),
        "interval_s": interval,
        "parts": len(parts),
        "schedule_cpu_us_per_page": round((cpu1 - cpu0) / pages, 2),
        "moved": moved,
        "move_cpu_us_per_page": round((cpu2 - cpu1) / max(1, moved), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=86400.0, help="seconds until each page is due")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))  # a redis-server of its own
        try:
            print(
                json.dumps(
                    asyncio.run(run(f"redis://127.0.0.1:{server.port}/0", args.pages, args.hosts, args.interval))
                )
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
