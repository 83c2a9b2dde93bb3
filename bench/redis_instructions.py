"""Instructions Redis executes per crawled page in real crawls: the single-host site of
bench/speed.py and the broad site of bench/broad.py, crawled by real ``scrapy crawl`` workers
(1 and 2) whose Redis runs under valgrind's callgrind (:class:`bench.redis_cpu.CallgrindRedis`).

    python -m bench.redis_instructions [--pages 20000] [--hosts 300] [--per-host 40] [--cap 2]

The figure to compare two versions of the frontier with: a time per page (``INFO cpu``) moves
with the machine's speed from one run to the next, this count hardly at all. It leaves out the
kernel's part of Redis's work (the network), and Redis runs many times slower under callgrind,
so the workers' batches are somewhat larger than in a crawl at full speed. Needs nginx and
valgrind.
"""

from __future__ import annotations

import argparse
import json

from bench import broad, speed
from bench.redis_cpu import CallgrindRedis
from tests.loopback import free_port


def count(
    start_url: str, workers: int, *, spider: str = "site", settings: dict[str, str] | None = None
) -> dict[str, float]:
    """One frontier crawl from ``start_url`` against a callgrind Redis: pages, pages/s, instructions/page."""
    server = CallgrindRedis()
    try:
        run, instructions = server.instructions(
            lambda: speed.crawl(
                f"callgrind-{spider}-{workers}",
                "frontier",
                workers,
                start_url,
                redis_url=server.url,
                spider=spider,
                settings=settings,
                timeout=1800,
            )
        )
    finally:
        server.stop()
    return {
        "pages": run["pages"],
        "pages_per_s": run["pages_per_s"],
        "instructions_per_page": round(instructions / run["pages"]) if run["pages"] else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20000, help="pages of the single-host site (0: skip it)")
    parser.add_argument("--hosts", type=int, default=300, help="hosts of the broad site (0: skip it)")
    parser.add_argument("--per-host", type=int, default=40)
    parser.add_argument("--cap", type=int, default=2, help="requests in flight per host in the broad crawl")
    args = parser.parse_args()
    out = {}
    if args.pages:
        with speed.Nginx(speed.make_site(args.pages)) as server:
            for workers in (1, 2):
                out[f"single host, {workers} worker(s)"] = r = count(server.url + "p0.html", workers)
                print(f"single host, {workers} worker(s): {r}", flush=True)
    if args.hosts:
        port = free_port(broad.host(0))
        with broad.BroadNginx(broad.make_site(args.hosts, args.per_host, port), args.hosts, port) as server:
            settings = {
                "SPIDER_MODULES": "bench.broad_spider",
                "CONCURRENT_REQUESTS_PER_DOMAIN": str(args.cap),
                "DOMAIN_CONCURRENCY": str(args.cap),
            }
            for workers in (1, 2):
                out[f"broad, {workers} worker(s)"] = r = count(
                    server.url + "p0.html", workers, spider="broad", settings=settings
                )
                print(f"broad, {workers} worker(s): {r}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
