"""A long revisit crawl: each worker's memory and Redis's over time.

    python -m bench.revisit_soak [--minutes 30] [--workers 2] [--pages 40]

Serves tests/changing_server.py (every 4th page changing every 8 s, ETag and Last-Modified) on
127.0.0.70, starts a redis-server of its own and ``--workers`` workers of the ``site`` spider with
``REVISIT_INTERVAL=3``, ``REVISIT_MIN_INTERVAL=1`` (items in an SQLite file of a temporary
directory), and samples every 30 s each worker's RSS (``/proc/<pid>/status``) and Redis's
``used_memory``. Prints one JSON line: the samples, each worker's RSS growth from the fifth
minute to the end (%), the pages fetched and the Redis memory at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from tests.loopback import free_port, wait_port
from tests.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run(minutes: float, workers: int, pages: int, tmp: Path) -> dict:
    server = RedisServer(tmp)
    port = free_port("127.0.0.70")
    log = tmp / "site.log"
    site = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "changing_server.py"), "127.0.0.70", str(port), str(log)],
        env={**os.environ, "PAGES": str(pages)},
    )
    wait_port("127.0.0.70", port)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": server.url}
    settings = {
        "REVISIT_INTERVAL": "3",
        "REVISIT_MIN_INTERVAL": "1",
        "REVISIT_MAX_INTERVAL": "120",
        "ROBOTSTXT_OBEY": "False",
        "SQLITE_PATH": str(tmp / "crawl.sqlite3"),
        "LOG_LEVEL": "INFO",
    }
    args = [a for k, v in settings.items() for a in ("-s", f"{k}={v}")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "scrapy", "crawl", "site", *args],
            cwd=ROOT,
            env=env,
            stdout=(tmp / f"worker{i}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        for i in range(workers)
    ]
    client = redis.Redis.from_url(server.url)
    time.sleep(5)
    client.lpush("site:start_urls", f"http://127.0.0.70:{port}/")
    samples = []
    start = time.monotonic()
    try:
        while time.monotonic() - start < minutes * 60:
            time.sleep(30)
            samples.append(
                {
                    "minute": round((time.monotonic() - start) / 60, 1),
                    "rss_kb": [rss_kb(p.pid) for p in procs],
                    "redis_used_memory": client.info("memory")["used_memory"],
                }
            )
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        site.kill()
        site.wait()
        used = client.info("memory")["used_memory"]
        server.stop()
    at5 = next((s for s in samples if s["minute"] >= 5), samples[0])
    return {
        "minutes": minutes,
        "workers": workers,
        "pages": pages,
        "fetches": len(log.read_text().splitlines()),
        "rss_growth_after_5_min_pct": [
            round(100 * (end - five) / five, 1) for five, end in zip(at5["rss_kb"], samples[-1]["rss_kb"])
        ],
        "redis_used_memory_end": used,
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pages", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(args.minutes, args.workers, args.pages, Path(tmp))))


if __name__ == "__main__":
    main()
