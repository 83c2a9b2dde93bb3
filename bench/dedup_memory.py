"""Dedup memory benchmark: Redis memory per URL of the exact dupefilter (packed: 64-bit
fingerprints in intset buckets, the default; set: hex fingerprints, scrapy-redis's layout) and
of the Bloom mode, at N URLs, through the same Lua check-and-add the frontier runs.

Starts its own redis-server on a free loopback port (nothing touches the shared Redis), adds N
distinct SHA-1 fingerprints in batches of 1,000, reads ``used_memory`` before and after, then
asks for Q fresh fingerprints and counts those the filter wrongly reports as seen.

    python -m bench.dedup_memory [--urls 10000000] [--queries 1000000] [--error-rate 1e-6]

Prints a table and writes bench/out/dedup.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from scrapy.settings import Settings

from scrapy_frontier.dupefilter import DedupConfig, Dupefilter, bloom_size
from scrapy_frontier.keys import Keys
from tests.loopback import free_port

OUT = Path(__file__).resolve().parent / "out"
BATCH = 1000


def fingerprints(prefix: str, start: int, n: int) -> list[str]:
    return [hashlib.sha1(f"{prefix}{i}".encode()).hexdigest() for i in range(start, start + n)]


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def measure(client: redis.Redis, config: DedupConfig, urls: int, queries: int) -> dict:
    client.flushdb()  # the benchmark's own server
    keys = Keys.for_spider(Settings(), "bench")
    dupefilter = Dupefilter(client, keys, config)
    before = used_memory(client)
    started = time.perf_counter()
    added = 0
    for start in range(0, urls, BATCH):
        added += sum(dupefilter.add(fingerprints("u", start, min(BATCH, urls - start)), 0))
    seconds = time.perf_counter() - started
    after = used_memory(client)
    lost = urls - added  # fingerprints taken as seen while being added: false positives too
    started = time.perf_counter()
    wrong = 0
    for start in range(0, queries, BATCH):
        wrong += BATCH - sum(dupefilter.add(fingerprints("q", start, BATCH), 0))
    query_seconds = time.perf_counter() - started
    return {
        "urls": urls,
        "layout": config.layout,
        "redis_bytes": after - before,
        "bytes_per_url": round((after - before) / urls, 2),
        "seconds": round(seconds, 1),
        "microseconds_per_url": round(seconds / urls * 1e6, 1),
        "taken_as_seen_while_adding": lost,
        "fresh_queries": queries,
        "false_positives": wrong,
        "false_positive_rate": wrong / queries if queries else None,
        "query_seconds": round(query_seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=10_000_000)
    parser.add_argument(
        "--queries", type=int, default=1_000_000, help="fresh fingerprints asked after the N (false positives)"
    )
    parser.add_argument("--error-rate", type=float, default=1e-6)
    args = parser.parse_args()
    args.queries -= args.queries % BATCH
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(port=port)
            for _ in range(100):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            results = {}
            for name, config in (
                ("packed", DedupConfig(buckets=-(-args.urls // 256))),
                ("set", DedupConfig(mode="set")),
                ("bloom", DedupConfig(mode="bloom", capacity=args.urls, error_rate=args.error_rate)),
            ):
                results[name] = measure(client, config, args.urls, args.queries)
                print(name, results[name], flush=True)
            bits, k = bloom_size(args.urls, args.error_rate / 2)
            results["bloom"].update(
                capacity=args.urls,
                error_rate=args.error_rate,
                bits=bits,
                hashes=k,
                theoretical_bytes_per_url=round(bits / 8 / args.urls, 2),
            )
            results["redis_version"] = client.info("server")["redis_version"]
        finally:
            server.terminate()
            server.wait()
    print(f"\n{'layout':<8}{'URLs':>12}{'bytes/URL':>11}{'µs/URL':>8}{'false positives':>22}")
    for name in ("packed", "set", "bloom"):
        r = results[name]
        print(
            f"{name:<8}{r['urls']:>12,}{r['bytes_per_url']:>11}{r['microseconds_per_url']:>8}"
            f"{r['false_positives']:>10} of {r['fresh_queries']:,}"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "dedup.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
