"""Speed benchmark (first part of the speed issue): plain Scrapy against this project's Redis
frontier with one and two workers, same spider (``site``), same site, item pipelines off.

Generates a static site of PAGES pages (11 links each), serves it with nginx on 127.0.0.31,
and prints pages/s and ratios; writes bench/out/speed.json.

    python bench/speed.py [--pages 20000] [--redis redis://127.0.0.1:6379/12]

Uses the given Redis database and deletes the keys ``site:*`` there before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
HOST = "127.0.0.31"
COMMON = {
    "ITEM_PIPELINES": "{}",
    "CONCURRENT_REQUESTS": "64",
    "CONCURRENT_REQUESTS_PER_DOMAIN": "64",
    "AUTOTHROTTLE_ENABLED": "False",
    "ROBOTSTXT_OBEY": "False",
    "TELNETCONSOLE_ENABLED": "False",
    "LOG_LEVEL": "DEBUG",
    "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
}


def make_site(pages: int) -> Path:
    site = OUT / f"site{pages}"
    if (site / "p0.html").exists():
        return site
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    rng = random.Random(7)
    filler = " ".join(["lorem ipsum dolor sit amet"] * 60)
    for i in range(pages):
        links = [(i + 1) % pages] + [rng.randrange(pages) for _ in range(10)]
        body = "".join(f'<a href="p{k}.html">page {k}</a> ' for k in links)
        (site / f"p{i}.html").write_text(f"<html><head><title>Page {i}</title></head><body><h1>Page {i}</h1><p>{filler}</p>{body}</body></html>")
    return site


def nginx(site: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    prefix = OUT / "nginx"
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"daemon off; worker_processes 1; pid {prefix}/nginx.pid; error_log {prefix}/error.log;\n"
        f"events {{ worker_connections 1024; }}\n"
        f"http {{ access_log off; types {{ text/html html; }} server {{ listen {HOST}:{port}; root {site}; }} }}\n"
    )
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(prefix)])
    for _ in range(100):
        try:
            socket.create_connection((HOST, port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://{HOST}:{port}/"


def crawl(n_workers: int, start: str, redis_url: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MYSQL_URL")}
    args = []
    for k, v in COMMON.items():
        args += ["-s", f"{k}={v}"]
    if redis_url:
        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(match="site:*"))
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i : i + 1000])
        env["REDIS_URL"] = redis_url
    else:
        args += ["-a", f"url={start}"]
    logs = [OUT / f"worker{i}.log" for i in range(n_workers)]
    procs = [subprocess.Popen([sys.executable, "-m", "scrapy", "crawl", "site", *args], cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT) for log in logs]
    if redis_url:
        time.sleep(3)
        client.lpush("site:start_urls", start)
    for p in procs:
        p.wait()
    stamps = []
    pages = 0
    for log in logs:
        text = log.read_text()
        pages += int(re.search(r"'response_received_count': (\d+)", text).group(1))
        stamps += re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \[scrapy.core.engine\] DEBUG: Crawled", text, re.M)
    stamps.sort()
    first = time.mktime(time.strptime(stamps[0], "%Y-%m-%d %H:%M:%S"))
    last = time.mktime(time.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S"))
    # first to last response, in whole seconds (+1: both ends are truncated)
    return {"pages": pages, "seconds": last - first + 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12")
    args = parser.parse_args()
    site = make_site(args.pages)
    server, url = nginx(site)
    results = {}
    try:
        for name, workers, redis_url in (("plain Scrapy", 1, None), ("frontier, 1 worker", 1, args.redis), ("frontier, 2 workers", 2, args.redis)):
            out = crawl(workers, url + "p0.html", redis_url)
            results[name] = {**out, "pages_per_s": round(out["pages"] / out["seconds"], 1)}
            print(name, results[name], flush=True)
    finally:
        server.terminate()
    base = results["plain Scrapy"]["pages_per_s"]
    print(f"\n{'run':<24}{'pages':>8}{'seconds':>9}{'pages/s':>9}{'ratio':>7}")
    for name, r in results.items():
        print(f"{name:<24}{r['pages']:>8}{r['seconds']:>9}{r['pages_per_s']:>9}{r['pages_per_s'] / base:>7.2f}")
    (OUT / "speed.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
