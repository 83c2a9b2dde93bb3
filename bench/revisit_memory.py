"""Redis bytes per scheduled revisit, and Redis CPU per revisit scheduled and moved when due.

    python -m bench.revisit_memory [--pages 1000000] [--hosts 1000]

Starts a redis-server of its own and schedules ``--pages`` revisits over ``--hosts`` hosts
through :meth:`Frontier.schedule <scrapy_frontier.frontier.Frontier.schedule>`, each the request
the revisit middleware writes for a page of the ``site`` spider (its revisit state with a
SHA-256 hex hash, an ETag and a Last-Modified, and the conditional headers). The bytes are
``used_memory`` after less before. Then it makes every page due and moves them all into their
hosts' queues (:meth:`Frontier.queue_due`), 500 a call. Prints one JSON line: the bytes per
scheduled page, and the Redis CPU (``INFO commandstats``, µs) per page scheduled and per page
moved.
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

from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.revisit import REVISIT_META
from scrapy_frontier.serialize import request_to_json
from tests.servers import RedisServer

BATCH = 1000


class _Spider(Spider):
    name = "bench"

    def parse(self, response):  # the default callback: not written
        pass


def payload(spider: Spider, host: str, i: int) -> str:
    """The JSON of page ``i``'s revisit, as the revisit middleware makes it."""
    state = {
        "interval": 86400.0,
        "first_seen": "2026-12-05T10:00:00.000+00:00",
        "changed_at": None,
        "changes": 0,
        "hash": hashlib.sha256(str(i).encode()).hexdigest(),
        "etag": f'"{i:x}-5f3a9c2b"',
        "last_modified": "Fri, 04 Dec 2026 18:22:05 GMT",
    }
    request = Request(
        f"https://{host}/section/{i % 97}/article-{i}.html",
        headers={"If-None-Match": state["etag"], "If-Modified-Since": state["last_modified"]},
        meta={"depth": 3, REVISIT_META: state},
        dont_filter=True,
    )
    return request_to_json(request, spider)


def cpu_us(sync: redis.Redis) -> float:
    return float(sum(v["usec"] for k, v in sync.info("commandstats").items() if k.startswith("cmdstat_evalsha")))


async def run(url: str, pages: int, hosts: int) -> dict:
    client = redis.asyncio.Redis.from_url(url)
    sync = redis.Redis.from_url(url)
    keys = Keys.for_spider(Settings(), "bench")
    frontier = Frontier(client, keys, "bench-node")
    spider = _Spider()
    await frontier.schedule([])  # scripts loaded before the counts start
    before, cpu0 = sync.info("memory")["used_memory"], cpu_us(sync)
    for start in range(0, pages, BATCH):
        revisits = []
        for i in range(start, min(pages, start + BATCH)):
            host = f"www.host{i % hosts}.example.com"
            fingerprint = hashlib.sha1(str(i).encode()).hexdigest()
            revisits.append((Entry(fingerprint, host, 0, payload(spider, host, i)), 1.0, True))
        await frontier.schedule(revisits)
    used, cpu1 = sync.info("memory")["used_memory"], cpu_us(sync)
    await asyncio.sleep(1.1)  # every page due
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
        "payload_bytes_example": len(payload(spider, "www.host0.example.com", 123456)),
        "schedule_cpu_us_per_page": round((cpu1 - cpu0) / pages, 2),
        "moved": moved,
        "move_cpu_us_per_page": round((cpu2 - cpu1) / max(1, moved), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))  # a redis-server of its own
        try:
            print(json.dumps(asyncio.run(run(f"redis://127.0.0.1:{server.port}/0", args.pages, args.hosts))))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
