"""Redis CPU per crawled page, a single Redis against a 3-master Redis Cluster, 1 and 2 workers.

    .venv/bin/python -m bench.cluster_cpu [--workers 1 2]

Crawls the python3.11-doc site (526 pages, served on loopback) with item pipelines off, once
per server layout and worker count, each on servers of its own. Redis CPU per page is the sum
over the masters of ``used_cpu_user + used_cpu_sys`` (``INFO cpu``) from before the start URL
to the end, divided by the pages crawled; the busiest master's share of it says how evenly
the shards spread. Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.speed import PIPELINES_OFF
from tests.conftest import DOCS, HttpServer, RedisCluster, RedisServer

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {**PIPELINES_OFF, "CONCURRENT_REQUESTS": "32", "MAX_IDLE_TIME_BEFORE_CLOSE": "3", "ROBOTSTXT_OBEY": "False", "LOG_LEVEL": "INFO", "METRICS_ENABLED": "False"}


def cpu(ports: list[int]) -> list[float]:
    out = []
    for port in ports:
        info = redis.Redis(port=port).info("cpu")
        out.append(info["used_cpu_user"] + info["used_cpu_sys"])
    return out


def run(layout: str, workers: int, site: HttpServer, tmp: Path) -> dict:
    if layout == "single":
        (tmp / "single").mkdir()
        server = RedisServer(tmp / "single", **{"appendonly": "no"})
        url, masters, stop = f"redis://127.0.0.1:{server.port}/0", [server.port], server.stop
    else:
        cluster = RedisCluster(tmp / "cluster")
        url, masters, stop = cluster.url, [m.port for m in cluster.masters()], cluster.stop
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    env.pop("MYSQL_URL", None)
    procs, logs = [], []
    try:
        for i in range(workers):
            log = tmp / f"{layout}-{workers}-{i}.log"
            cmd = [sys.executable, "-m", "scrapy", "crawl", "site", "-s", f"SQLITE_PATH={tmp / 'x.sqlite3'}"]
            for k, v in SETTINGS.items():
                cmd += ["-s", f"{k}={v}"]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT))
            logs.append(log)
        for log in logs:
            while "Joined the crawl" not in log.read_text(errors="replace"):
                time.sleep(0.1)
        before = cpu(masters)
        client = redis.RedisCluster.from_url(url) if layout == "cluster" else redis.Redis.from_url(url)
        started = time.monotonic()
        client.lpush("site:start_urls", f"{site.url}index.html")
        for p in procs:
            p.wait(600)
        seconds = time.monotonic() - started
        spent = [a - b for a, b in zip(cpu(masters), before)]
        pages = 0
        for log in logs:
            text = log.read_text(errors="replace")
            marker = "'response_received_count': "
            if marker in text:
                pages += int(text.split(marker)[-1].split(",")[0].split("}")[0])
        total = sum(spent)
        return {
            "layout": layout,
            "masters": len(masters),
            "workers": workers,
            "pages": pages,
            "seconds_with_idle_close": round(seconds, 1),
            "redis_cpu_us_per_page": round(total / pages * 1e6, 1) if pages else None,
            "busiest_master_share": round(max(spent) / total, 2) if total else None,
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    site = HttpServer(DOCS, "127.0.0.33")
    try:
        for workers in args.workers:
            for layout in ("single", "cluster"):
                with tempfile.TemporaryDirectory() as tmp:
                    print(json.dumps(run(layout, workers, site, Path(tmp))), flush=True)
    finally:
        site.stop()


if __name__ == "__main__":
    main()
