"""Redis CPU per crawled page and pages/s: a single Redis against a 3-master Redis Cluster, and
the cost of waiting for replicas (``FRONTIER_WAIT_REPLICAS``).

    python -m bench.cluster_cpu            # the python docs: one host, 526 pages
    python -m bench.cluster_cpu --broad    # 40 hosts x 30 pages (bench/broad_site.py)

Each run has servers of its own and item pipelines off. Redis CPU per page is the sum over the
masters of ``used_cpu_user + used_cpu_sys`` (``INFO cpu``) from the start URL to the last
worker's exit, divided by the pages crawled; the busiest master's share of it says how evenly
the shards spread; pages/s is from the first response to the last (bench/timing.py). Prints one
JSON line per run.
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
from tests.loopback import free_port, wait_port
from tests.servers import DOCS, HttpServer, RedisCluster, RedisServer

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {
    **PIPELINES_OFF,
    "CONCURRENT_REQUESTS": "32",
    "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
    "ROBOTSTXT_OBEY": "False",
    "LOG_LEVEL": "INFO",
    "METRICS_ENABLED": "False",
    "STATS_CLASS": "bench.timing.TimingStats",
}


def cpu(ports: list[int]) -> list[float]:
    out = []
    for port in ports:
        info = redis.Redis(port=port).info("cpu")
        out.append(info["used_cpu_user"] + info["used_cpu_sys"])
    return out


def run(layout: str, workers: int, start_url: str, tmp: Path, spider_settings: dict[str, str], label: str) -> dict:
    if layout == "single":
        (tmp / "single").mkdir()
        server = RedisServer(tmp / "single", **{"appendonly": "no"})
        url, masters, stop = f"redis://127.0.0.1:{server.port}/0", [server.port], server.stop
    else:
        cluster = RedisCluster(tmp / "cluster")
        url, masters, stop = cluster.url, [m.port for m in cluster.masters()], cluster.stop
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    env.pop("MYSQL_URL", None)
    procs, logs, stats_files = [], [], []
    try:
        for i in range(workers):
            log, stats = tmp / f"{layout}-{workers}-{i}.log", tmp / f"{layout}-{workers}-{i}.json"
            cmd = [
                sys.executable,
                "-m",
                "scrapy",
                "crawl",
                "site",
                "-s",
                f"SQLITE_PATH={tmp / 'x.sqlite3'}",
                "-s",
                f"BENCH_STATS_FILE={stats}",
            ]
            for k, v in {**SETTINGS, **spider_settings}.items():
                cmd += ["-s", f"{k}={v}"]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT))
            logs.append(log)
            stats_files.append(stats)
        for log in logs:
            while "Joined the crawl" not in log.read_text(errors="replace"):
                time.sleep(0.1)
        before = cpu(masters)
        client = redis.RedisCluster.from_url(url) if layout == "cluster" else redis.Redis.from_url(url)
        client.lpush("site:start_urls", start_url)
        for p in procs:
            p.wait(900)
        spent = [a - b for a, b in zip(cpu(masters), before)]
        stats = [json.loads(f.read_text()) for f in stats_files if f.exists()]
        crawled = [s for s in stats if "bench/first_response" in s]
        pages = sum(s.get("response_received_count", 0) for s in stats)
        seconds = max(s["bench/last_response"] for s in crawled) - min(s["bench/first_response"] for s in crawled)
        total = sum(spent)
        return {
            "run": label,
            "layout": layout,
            "masters": len(masters),
            "workers": workers,
            "pages": pages,
            "pages_per_s": round(pages / seconds, 1) if seconds else None,
            "redis_cpu_us_per_page": round(total / pages * 1e6, 1) if pages else None,
            "busiest_master_share": round(max(spent) / total, 2) if total else None,
            "replica_wait_short": sum(int(s.get("frontier/replica_wait_short", 0)) for s in stats),
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--broad", action="store_true", help="the 40-host site, with and without waiting for replicas")
    parser.add_argument("--layouts", nargs="+", default=["single", "cluster"], help="single, cluster or both")
    args = parser.parse_args()
    runs: list[tuple[str, str, dict[str, str]]]
    if args.broad:
        port = free_port("127.1.0.1")
        site = subprocess.Popen([sys.executable, "-m", "bench.broad_site", "40", "30", str(port)], cwd=ROOT)
        wait_port("127.1.0.1", port)
        # the site spider follows the hosts its start request names (meta site_hosts)
        hosts = [f"127.1.{(i + 1) // 256}.{(i + 1) % 256}" for i in range(40)]
        start, stop_site = json.dumps({"url": f"http://127.1.0.1:{port}/p/0", "meta": {"site_hosts": hosts}}), site.kill
        runs = [
            ("single", "single", {}),
            ("cluster", "cluster, no WAIT", {"FRONTIER_WAIT_REPLICAS": "0"}),
            ("cluster", "cluster, WAIT 1 replica", {"FRONTIER_WAIT_REPLICAS": "1"}),
        ]
    else:
        docs = HttpServer(DOCS, "127.0.0.33")
        start, stop_site = f"{docs.url}index.html", docs.stop
        runs = [("single", "single", {}), ("cluster", "cluster", {})]
    try:
        for workers in args.workers:
            for layout, label, extra in runs:
                if layout not in args.layouts:
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    print(json.dumps(run(layout, workers, start, Path(tmp), extra, label)), flush=True)
    finally:
        stop_site()


if __name__ == "__main__":
    main()
