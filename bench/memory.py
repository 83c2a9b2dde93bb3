"""Worker memory as the shared frontier grows to millions of requests.

One worker of this project crawls (``REDIS_URL`` set to a throwaway ``redis-server``, item
pipelines off) while the frontier grows to REQUESTS requests; the worker's RSS
(``/proc/<pid>/status`` VmRSS) and Redis's ``used_memory`` are sampled twice a second with the
frontier's size. Two ways to grow it:

- ``--source push`` (default): this script queues distinct requests for
  ``/fill/<n>`` (a page without links) with :meth:`scrapy_frontier.frontier.Frontier.push`,
  in batches of 10,000, as a worker's scheduler does, and the worker crawls them meanwhile. At
  each checkpoint (0, REQUESTS/3, 2*REQUESTS/3, REQUESTS) pushing pauses HOLD seconds and the
  worker's RSS is read at the end of the pause.
- ``--source links``: every page under ``/fan/`` has FAN relative links (``0/`` ...), so the
  worker itself grows the frontier by about FAN requests a page (breadth first:
  ``DEPTH_PRIORITY=1``, ``DEPTH_LIMIT=3``). Slower: every request is built, fingerprinted and
  serialized by the worker (a few hundred per second per core here).

    python -m bench.memory [--requests 3000000] [--source push|links] [--fan 1000] [--hold 5]

Prints the worker's RSS at the checkpoints; writes bench/out/memory.json. Stops the worker with
SIGINT and deletes the throwaway Redis at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from bench.speed import (
    COMMON,
    OUT,
    PIPELINES_OFF,
    Nginx,
    loadavg,
    rss_kb,
    start_workers,
    wait_opened,
)
from tests.servers import RedisServer, queued_requests

FILL_PAGE = "<html><head><title>Fill</title></head><body><p>A page without links.</p></body></html>"
LOCATIONS = "location /fan/ { try_files /fan.html =404; } location /fill/ { try_files /fill.html =404; }"
PUSH_BATCH = 10_000


def make_site(fan: int) -> Path:
    """``bench/out/fan<fan>/``: ``fan.html`` with ``fan`` links to the subdirectories ``0/`` ...,
    and ``fill.html``, a page without links (nginx serves them at every path under /fan/, /fill/)."""
    site = OUT / f"fan{fan}"
    site.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="{i}/">{i}</a> ' for i in range(fan))
    (site / "fan.html").write_text(f"<html><head><title>Fan</title></head><body><p>{links}</p></body></html>")
    (site / "fill.html").write_text(FILL_PAGE)
    return site


def frontier_size(client: redis.Redis) -> int:
    """Requests queued in the frontier: the sum of the per-host queues ``site:requests:<host>``
    listed in ``site:requests`` (see scrapy_frontier/keys.py)."""
    return queued_requests(client)


class Sampler(threading.Thread):
    """Samples ``[seconds, frontier size, worker RSS MB, Redis used MB]`` every ``every`` seconds."""

    def __init__(self, pid: int, redis_url: str, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.client = redis.Redis.from_url(redis_url)
        self.every = every
        self.samples: list[list[float]] = []
        self.started = time.monotonic()
        self.stopping = threading.Event()
        self.sample()

    def sample(self) -> list[float]:
        kb = rss_kb(self.pid) or 0
        s = [
            round(time.monotonic() - self.started, 2),
            frontier_size(self.client),
            round(kb / 1024, 1),
            round(self.client.info("memory")["used_memory"] / 2**20, 1),
        ]
        self.samples.append(s)
        return s

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            self.sample()

    def stop(self) -> None:
        self.stopping.set()
        self.join()
        self.client.close()


async def fill(
    redis_url: str,
    base_url: str,
    requests: int,
    checkpoints: list[int],
    hold: float,
    sampler: Sampler,
    worker: subprocess.Popen,
) -> list[list[float]]:
    """Push distinct ``/fill/<n>`` requests until the frontier holds ``requests``; pause ``hold``
    seconds at each checkpoint and return the sample taken at the end of each pause."""
    import hashlib

    import redis.asyncio
    from scrapy import Request
    from scrapy.settings import Settings

    from crawler.spiders.site import SiteSpider
    from scrapy_frontier.frontier import Entry, Frontier
    from scrapy_frontier.keys import Keys, queue_host
    from scrapy_frontier.serialize import request_to_json

    spider = SiteSpider()
    # The payload a worker's scheduler would queue for such a request, with a placeholder.
    template = request_to_json(Request(base_url + "fill/NUMBER", callback=spider.parse), spider)
    host = queue_host(urlsplit(base_url).hostname)
    client = redis.asyncio.Redis.from_url(redis_url)
    frontier = Frontier(client, Keys.for_spider(Settings(), "site"), "bench-memory-filler")
    marks = []
    n = 0
    try:
        for target in checkpoints:
            while frontier_size_now(sampler) < target:
                count = min(PUSH_BATCH, max(1000, target - frontier_size_now(sampler)))
                entries = []
                for i in range(n, n + count):
                    url = f"{base_url}fill/{i}"
                    entries.append(
                        Entry(hashlib.sha1(url.encode()).hexdigest(), host, 0, template.replace("NUMBER", str(i)))
                    )
                n += count
                await frontier.push(entries)
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker exited with status {worker.returncode}")
            await asyncio.sleep(hold)
            marks.append(sampler.sample())
    finally:
        await client.aclose()
    return marks


def frontier_size_now(sampler: Sampler) -> int:
    return frontier_size(sampler.client)


def run(
    requests: int = 3_000_000,
    source: str = "push",
    fan: int = 1000,
    hold: float = 5.0,
    timeout: float = 3600.0,
    checkpoints: int = 3,
) -> dict[str, Any]:
    """Grow the frontier to ``requests`` requests while one worker crawls.

    Returns ``{"requests", "source", "checkpoints": [{"frontier", "seconds", "worker_rss_mb",
    "redis_used_mb"}, ...], "growth_mb", "peak_rss_mb", "pages", "samples": [[seconds,
    frontier, worker_rss_mb, redis_used_mb], ...]}``. ``growth_mb`` is the worker's RSS at the
    last checkpoint minus that at the first non-zero one: flat means a few MB. Raises
    ``RuntimeError`` if the worker dies or the frontier does not grow in ``timeout`` seconds.
    """
    if source not in ("push", "links"):
        raise ValueError(f"source must be push or links, not {source!r}")
    site = make_site(fan)
    settings = {**COMMON, **PIPELINES_OFF, "MAX_IDLE_TIME_BEFORE_CLOSE": "0", "LOGSTATS_INTERVAL": "10"}
    if source == "links":
        settings.update({"DEPTH_PRIORITY": "1", "DEPTH_LIMIT": "3"})
    targets = [requests * k // checkpoints for k in range(checkpoints + 1)]
    with Nginx(site, locations=LOCATIONS, name="nginx-memory") as server, RedisServer() as rs:
        env = {k: v for k, v in os.environ.items() if k not in ("MYSQL_URL", "LOG_JSON")}
        env["REDIS_URL"] = rs.url
        [(proc, log, stats_file)] = start_workers(1, "memory", settings, env, [])
        sampler = None
        try:
            wait_opened([(proc, log, stats_file)])
            time.sleep(hold)
            sampler = Sampler(proc.pid, rs.url)
            sampler.start()
            if source == "push":
                marks = asyncio.run(fill(rs.url, server.url, requests, targets, hold, sampler, proc))
            else:
                marks = [sampler.samples[0]]
                client = redis.Redis.from_url(rs.url)
                client.lpush("site:start_urls", json.dumps({"url": server.url + "fan/"}))
                client.close()
                for target in targets[1:]:
                    while sampler.samples[-1][1] < target:
                        if proc.poll() is not None:
                            raise RuntimeError(f"the worker exited with status {proc.returncode}; see {log}")
                        if sampler.samples[-1][0] > timeout:
                            raise RuntimeError(
                                f"the frontier reached only {sampler.samples[-1][1]} requests in {timeout:.0f} s"
                            )
                        time.sleep(0.5)
                    marks.append(sampler.samples[-1])
        finally:
            if sampler is not None:
                sampler.stop()
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    keys = ("seconds", "frontier", "worker_rss_mb", "redis_used_mb")
    points = [dict(zip(keys, m)) for m in marks]
    return {
        "requests": requests,
        "source": source,
        "fan": fan if source == "links" else None,
        "pages": stats.get("response_received_count"),
        "seconds": sampler.samples[-1][0],
        "checkpoints": points,
        "growth_mb": round(points[-1]["worker_rss_mb"] - points[1]["worker_rss_mb"], 1),
        "peak_rss_mb": max(s[2] for s in sampler.samples),
        "samples": sampler.samples,
        "load_after": loadavg(),
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"{'frontier (requests)':>20}{'worker RSS (MB)':>17}{'Redis used (MB)':>17}")
    for m in result["checkpoints"]:
        print(f"{m['frontier']:>20,}{m['worker_rss_mb']:>17}{m['redis_used_mb']:>17}")
    print(
        f"worker RSS from {result['checkpoints'][1]['frontier']:,} to {result['checkpoints'][-1]['frontier']:,} "
        f"requests: {result['growth_mb']:+} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--requests", type=int, default=3_000_000, help="stop when the frontier holds this many requests"
    )
    parser.add_argument(
        "--source",
        choices=("push", "links"),
        default="push",
        help="who grows the frontier: this script (push) or the crawl's own links",
    )
    parser.add_argument("--fan", type=int, default=1000, help="links per page (--source links)")
    parser.add_argument(
        "--hold", type=float, default=5.0, help="seconds the worker crawls at each checkpoint before its RSS is read"
    )
    args = parser.parse_args()
    result = run(args.requests, args.source, args.fan, args.hold)
    print_table(result)
    (OUT / "memory.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
