"""Does the lease script's cost grow with the number of hosts queued? Redis time per lease call
(``INFO commandstats``) with few and with a million hosts queued.

    python -m bench.lease_hosts [--hosts 1000 1000000] [--calls 2000]

For each host count, on a redis-server of its own: queue one request on each of that many hosts
(the frontier's push script, 1,000 a call), then make ``--calls`` lease calls of 32 requests
each, every host due, with a rate limit per host, so that each call walks due hosts and re-scores
them, and print the microseconds of Redis time per call (cmdstat_evalsha).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

import redis
import redis.asyncio
from scrapy.settings import Settings

from scrapy_frontier.dupefilter import DedupConfig
from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys
from tests.servers import RedisServer


def evalsha_usec(client: redis.Redis) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


async def run(url: str, hosts: int, calls: int) -> dict:
    client = redis.asyncio.Redis.from_url(url)
    keys = Keys.for_spider(Settings(), "bench")
    frontier = Frontier(client, keys, "bench-node", dedup=DedupConfig(), default_rate=1.0)
    for start in range(0, hosts, 1000):
        await frontier.push(
            [
                Entry("", f"h{i}.example", 0, f'{{"url":"http://h{i}.example/"}}')
                for i in range(start, min(hosts, start + 1000))
            ]
        )
    sync = redis.Redis.from_url(url)
    before = evalsha_usec(sync)
    leased = 0
    for _ in range(calls):
        leased += len(await frontier.lease(32))
    after = evalsha_usec(sync)
    await client.aclose()
    n, usec = after[0] - before[0], after[1] - before[1]
    return {"hosts_queued": hosts, "lease_calls": n, "leased": leased, "redis_us_per_lease_call": round(usec / n, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000, 1_000_000])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    for hosts in args.hosts:
        with tempfile.TemporaryDirectory() as tmp:
            server = RedisServer(Path(tmp))  # a redis-server of its own
            try:
                print(
                    json.dumps(
                        asyncio.run(run(f"redis://127.0.0.1:{server.port}/0", hosts, min(args.calls, hosts // 32 or 1)))
                    ),
                    flush=True,
                )
            finally:
                server.stop()


if __name__ == "__main__":
    main()
