"""Redis bytes per queued request: ``MEMORY USAGE`` of the frontier's queues (the hosts index and
every host's queue) divided by the requests queued.

    python -m bench.queue_memory [--requests 1000000] [--hosts 1000]

Starts a redis-server of its own, queues ``--requests`` requests spread over ``--hosts`` hosts
through the frontier's push script (payloads as a crawl writes them: the URL of a page two or three
levels down, a depth in meta), then prints one JSON line. The payloads are written from a template
that is checked, once, to be what ``request_to_json`` makes of the same request, and the
fingerprints are Scrapy's fingerprinter's for the first 1,000 and a SHA-1 of the URL after (the
same size and spread): building ten million Scrapy requests would take longer than queueing them.
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
from scrapy.utils.request import RequestFingerprinter

from scrapy_frontier.dupefilter import DedupConfig
from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.serialize import request_to_json
from tests.servers import RedisServer

BATCH = 1000


class _Spider(Spider):
    name = "bench"

    def parse(self, response):  # the default callback: not written
        pass


async def fill(url: str, requests: int, hosts: int) -> dict:
    client = redis.asyncio.Redis.from_url(url)
    keys = Keys.for_spider(Settings(), "bench")
    frontier = Frontier(client, keys, "bench-node", dedup=DedupConfig())
    spider = _Spider()
    fingerprinter = RequestFingerprinter()
    template = '{{"url":"https://{host}/section/{section}/article-{i}.html","meta":{{"depth":3}}}}'
    for start in range(0, requests, BATCH):
        entries = []
        for i in range(start, min(requests, start + BATCH)):
            host = f"www.host{i % hosts}.example.com"
            page_url = f"https://{host}/section/{i % 97}/article-{i}.html"
            payload = template.format(host=host, section=i % 97, i=i)
            if i < 1000:
                request = Request(page_url, meta={"depth": 3})
                assert payload == request_to_json(request, spider), (payload, request_to_json(request, spider))
                fingerprint = fingerprinter.fingerprint(request).hex()
            else:
                fingerprint = hashlib.sha1(page_url.encode()).hexdigest()
            entries.append(Entry(fingerprint, host, 0, payload))
        await frontier.push(entries)
    sync = redis.Redis.from_url(url)
    total = sync.memory_usage(keys.queue, samples=0) or 0
    hosts_seen = sync.zrange(keys.queue, 0, -1)
    for start in range(0, len(hosts_seen), 1000):
        chunk = hosts_seen[start : start + 1000]
        with sync.pipeline(transaction=False) as pipe:
            for host in chunk:
                pipe.zrange(keys.queue_prefix.encode() + host, 0, -1)  # its priorities but 0
            priorities = pipe.execute()
        with sync.pipeline(transaction=False) as pipe:
            for host, scores in zip(chunk, priorities):
                q = keys.queue_prefix.encode() + host
                pipe.memory_usage(q, samples=0)
                for score in {b"0", *scores}:  # priority 0's list has no entry in q
                    pipe.memory_usage(q + b"#" + score, samples=0)  # a priority's list
            total += sum(n or 0 for n in pipe.execute())
    total += sync.memory_usage(keys.queue_prefix + "@queued", samples=0) or 0
    used = sync.info("memory")["used_memory"]
    await client.aclose()
    return {
        "requests": requests,
        "hosts": hosts,
        "queue_bytes": total,
        "bytes_per_request": round(total / requests, 1),
        "redis_used_memory": used,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))  # a redis-server of its own
        try:
            print(json.dumps(asyncio.run(fill(f"redis://127.0.0.1:{server.port}/0", args.requests, args.hosts))))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
