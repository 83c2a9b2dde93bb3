"""Crawl speed: the same spider (``site``) on the same static site, with plain Scrapy, scrapy-redis
and this project's Redis frontier (one or more workers), item pipelines off or on.

Generates a static site of PAGES pages (11 links each, about 3 KB), serves it with nginx on
127.0.0.31 (no download delay, 64 concurrent requests, AutoThrottle and robots.txt off) and
times each crawl from its first response to its last (all workers together), as recorded by
:class:`bench.timing.TimingStats`. ``python -m bench.run`` runs every part of the benchmark; this file
alone runs plain Scrapy and the frontier with one and two workers:

    python -m bench.speed [--pages 20000] [--redis redis://127.0.0.1:6379/12]

Without ``--redis`` a throwaway ``redis-server`` is started on a free loopback port; with it,
the keys ``site:*`` of that database are deleted before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from bench.redis_cpu import RedisCpu
from tests.loopback import free_port, wait_port
from tests.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
HOST = "127.0.0.31"
#: Settings of every benchmark crawl (see the README's Speed section).
COMMON = {
    "CONCURRENT_REQUESTS": "64",
    "CONCURRENT_REQUESTS_PER_DOMAIN": "64",
    "AUTOTHROTTLE_ENABLED": "False",
    # no cap across the workers (by default the crawl's is one worker's 64): each worker its own 64,
    # as each scrapy-redis worker has
    "DOMAIN_CONCURRENCY": "0",
    "ROBOTSTXT_OBEY": "False",
    "TELNETCONSOLE_ENABLED": "False",
    "LOG_LEVEL": "INFO",
    "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
    "STATS_CLASS": "bench.timing.TimingStats",
    # the crawl's machinery, not the page text: trafilatura's cost is bench.text_extraction's
    "PAGE_TEXT_EXTRACTOR": "rule",
}
#: Item pipelines off: the add-on's switches (it adds its pipelines to ITEM_PIPELINES as a
#: project's own entries would be added), and no project pipeline either.
PIPELINES_OFF = {
    "ITEM_PIPELINES": "{}",
    "VALIDATION_ENABLED": "False",
    "REDIS_CACHE_ENABLED": "False",
    "STORAGE_ENABLED": "False",
}
#: scrapy-redis 0.9.1 with its own scheduler, dupefilter and start-URL feeding; see
#: bench/scrapy_redis_spider.py for what it needs on Scrapy 2.19.
SCRAPY_REDIS = {
    # without this project's add-on: its REDIS_HOST/PORT/DB would switch the frontier on
    "ADDONS": "{}",
    "SPIDER_MODULES": "bench.scrapy_redis_spider",
    "SCHEDULER": "bench.scrapy_redis_spider.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    # Each worker flushes the shared queue and dupefilter when it closes unless the crawl
    # persists: a worker that finishes first would wipe the other's work.
    "SCHEDULER_PERSIST": "True",
}
MODES = ("plain", "scrapy-redis", "frontier")


def make_site(pages: int) -> Path:
    """Write (once) ``bench/out/site<pages>/p<i>.html``: each page links to the next and to 10
    random pages, so every page is reachable from ``p0.html``."""
    site = OUT / f"site{pages}"
    if (site / f"p{pages - 1}.html").exists():
        return site
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    rng = random.Random(7)
    filler = " ".join(["lorem ipsum dolor sit amet"] * 60)
    for i in range(pages):
        links = [(i + 1) % pages] + [rng.randrange(pages) for _ in range(10)]
        body = "".join(f'<a href="p{k}.html">page {k}</a> ' for k in links)
        (site / f"p{i}.html").write_text(
            f"<html><head><title>Page {i}</title></head><body><h1>Page {i}</h1><p>{filler}</p>{body}</body></html>"
        )
    return site


class Nginx:
    """nginx serving ``root`` on ``HOST`` (a free port), one worker process, no access log.

    ``locations`` is extra ``server`` configuration (e.g. a ``location`` block). Use as a context
    manager; :attr:`url` ends with ``/``.
    """

    def __init__(self, root: Path, locations: str = "", name: str = "nginx") -> None:
        if not shutil.which("nginx"):
            raise SystemExit("nginx is not installed: apt-get install nginx-light (or nginx)")
        self.port = free_port(HOST)
        self.url = f"http://{HOST}:{self.port}/"
        prefix = OUT / name
        prefix.mkdir(parents=True, exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(
            f"daemon off; worker_processes 1; pid {prefix}/nginx.pid; error_log {prefix}/error.log;\n"
            f"events {{ worker_connections 1024; }}\n"
            f"http {{ access_log off; types {{ text/html html; }} default_type text/html;\n"
            f"  server {{ listen {HOST}:{self.port}; root {root}; {locations} }} }}\n"
        )
        self.proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(prefix)])
        wait_port(HOST, self.port)

    def __enter__(self) -> Nginx:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def clear_crawl(redis_url: str, spider: str = "site") -> None:
    """Delete the keys ``<spider>:*`` of the database of ``redis_url`` (nothing else)."""
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{spider}:*", count=1000))
    for i in range(0, len(keys), 1000):
        client.delete(*keys[i : i + 1000])
    client.close()


def rss_kb(pid: int, field: str = "VmRSS") -> int | None:
    """``VmRSS`` (or another ``Vm*`` field) of process ``pid`` in kB, from ``/proc/<pid>/status``;
    None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def loadavg() -> float:
    """The 1-minute load average (other work on the machine skews every figure)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def start_workers(
    n: int, name: str, settings: dict[str, str], env: dict[str, str], args: list[str], spider: str = "site"
) -> list[tuple[subprocess.Popen, Path, Path]]:
    """Start ``n`` ``scrapy crawl <spider>`` processes; returns (process, log file, stats file) each."""
    workers = []
    for i in range(n):
        log = OUT / f"{name}-{i}.log"
        stats = OUT / f"{name}-{i}.stats.json"
        stats.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "scrapy", "crawl", spider, *args]
        for k, v in {**settings, "BENCH_STATS_FILE": str(stats)}.items():
            cmd += ["-s", f"{k}={v}"]
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        workers.append((proc, log, stats))
    return workers


def wait_opened(workers: list[tuple[subprocess.Popen, Path, Path]], timeout: float = 60.0) -> None:
    """Wait until every worker logged "Spider opened" (its crawl is ready to take requests)."""
    deadline = time.monotonic() + timeout
    for proc, log, _ in workers:
        while "Spider opened" not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"a worker exited with status {proc.returncode} before opening; see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"a worker did not open within {timeout:.0f} s; see {log}")
            time.sleep(0.1)


def crawl(
    name: str,
    mode: str,
    workers: int,
    start_url: str,
    *,
    redis_url: str | None = None,
    mysql_url: str | None = None,
    pipelines: bool = False,
    timeout: float = 1800.0,
    spider: str = "site",
    settings: dict[str, str] | None = None,
    profile: bool = False,
) -> dict[str, Any]:
    """Crawl from ``start_url`` with ``workers`` processes and return the figures.

    ``mode``: ``plain`` (Scrapy's memory scheduler, ``-a url=``), ``scrapy-redis`` (its scheduler,
    dupefilter and ``site:start_urls``, Redis given by REDIS_HOST/PORT/DB, this project's add-on
    off) or ``frontier`` (``REDIS_URL``: this project's scheduler). With
    ``pipelines`` the project's ITEM_PIPELINES run (storage in ``mysql_url``); else none.
    ``spider`` is the spider crawled and ``settings`` more ``-s`` settings. Runs with a Redis
    also report its CPU per page (bench/redis_cpu.py: ``redis_cpu_us_per_page``,
    ``commandstats``; with ``profile``, every command is logged and summed per script).

    Returns ``{"pages", "seconds", "pages_per_s", "worker_cpu_ms_per_page", "items", "stored",
    "duplicates_filtered", "peak_rss_mb", "exit_codes", "load_before", "load_after"}``: pages =
    responses received by all workers, seconds = first response to last. Raises ``RuntimeError`` if
    a worker fails or the crawl outlives ``timeout``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MYSQL_URL", "LOG_JSON")}
    extra = settings or {}
    settings = {**COMMON, **({} if pipelines else PIPELINES_OFF), **extra}
    args: list[str] = []
    if mysql_url:
        env["MYSQL_URL"] = mysql_url
    if mode != "plain":
        assert redis_url, "scrapy-redis and frontier runs need a Redis"
        clear_crawl(redis_url, spider)
    if mode == "plain":
        args += ["-a", f"url={start_url}"]
    elif mode == "frontier":
        env["REDIS_URL"] = redis_url
    else:
        parts = urlsplit(redis_url)
        settings.update(SCRAPY_REDIS)
        settings.update(
            {
                "REDIS_HOST": parts.hostname or "127.0.0.1",
                "REDIS_PORT": str(parts.port or 6379),
                "REDIS_DB": parts.path.strip("/") or "0",
            }
        )
        if parts.password:
            settings["REDIS_PARAMS"] = json.dumps({"password": parts.password})
    load_before = loadavg()
    meter = RedisCpu(redis_url, profile) if mode != "plain" else None
    if meter:
        meter.idle()
    procs = start_workers(workers, name, settings, env, args, spider)
    peak: dict[int, int] = {}
    try:
        if mode != "plain":
            wait_opened(procs)
            meter.start()
            client = redis.Redis.from_url(redis_url)
            client.lpush(f"{spider}:start_urls", json.dumps({"url": start_url}))
            client.close()
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p, _, _ in procs):
            for p, _, _ in procs:
                kb = rss_kb(p.pid)
                if kb:
                    peak[p.pid] = max(peak.get(p.pid, 0), kb)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the crawl took more than {timeout:.0f} s")
            time.sleep(0.25)
        if meter:
            meter.stop()
    finally:
        for p, _, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p, _, _ in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if mode != "plain":
            clear_crawl(redis_url, spider)
    stats = []
    for p, log, stats_file in procs:
        if p.returncode != 0 or not stats_file.exists():
            raise RuntimeError(f"{name}: a worker exited with status {p.returncode}; see {log}")
        stats.append(json.loads(stats_file.read_text()))
    crawled = [s for s in stats if "bench/first_response" in s]
    if not crawled:
        raise RuntimeError(f"{name}: no response was received; see {procs[0][1]}")
    pages = sum(s.get("response_received_count", 0) for s in stats)
    seconds = max(s["bench/last_response"] for s in crawled) - min(s["bench/first_response"] for s in crawled)
    redis_figures = meter.figures(pages) if meter else {}
    return {
        "pages": pages,
        "seconds": round(seconds, 2),
        "pages_per_s": round(pages / seconds, 1) if seconds > 0 else None,
        # CPU the workers used between their first and last response, per page (less sensitive
        # than pages/s to other work on the machine; Redis, MySQL and nginx not included).
        "worker_cpu_ms_per_page": round(
            sum(s["bench/last_cpu"] - s["bench/first_cpu"] for s in crawled) / pages * 1000, 2
        )
        if pages
        else None,
        "items": sum(s.get("item_scraped_count", 0) for s in stats),
        "stored": sum(s.get("storage/written/pages", 0) for s in stats),
        "duplicates_filtered": sum(s.get("dupefilter/filtered", 0) for s in stats),
        "peak_rss_mb": round(max(peak.values()) / 1024, 1) if peak else None,
        "exit_codes": [p.returncode for p, _, _ in procs],
        "load_before": load_before,
        "load_after": loadavg(),
        # the scheduler's frontier calls and the politeness counts, summed over the workers
        "calls": {
            k: sum(s.get(k, 0) for s in stats)
            for k in sorted({k for s in stats for k in s if k.startswith(("frontier/calls/", "politeness/"))})
        },
        **redis_figures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20000)
    parser.add_argument(
        "--redis",
        default=None,
        help="a Redis database URL to use (its site:* keys are deleted); default: a throwaway redis-server",
    )
    args = parser.parse_args()
    site = make_site(args.pages)
    results = {}
    with Nginx(site) as server:
        throwaway = None if args.redis else RedisServer()
        redis_url = args.redis or throwaway.url
        try:
            for name, mode, workers in (
                ("plain Scrapy", "plain", 1),
                ("frontier, 1 worker", "frontier", 1),
                ("frontier, 2 workers", "frontier", 2),
            ):
                results[name] = crawl(
                    name.replace(" ", "").replace(",", "-"), mode, workers, server.url + "p0.html", redis_url=redis_url
                )
                print(name, results[name], flush=True)
        finally:
            if throwaway:
                throwaway.stop()
    base = results["plain Scrapy"]["pages_per_s"]
    print(f"\n{'run':<24}{'pages':>8}{'seconds':>9}{'pages/s':>9}{'ratio':>7}")
    for name, r in results.items():
        print(f"{name:<24}{r['pages']:>8}{r['seconds']:>9}{r['pages_per_s']:>9}{r['pages_per_s'] / base:>7.2f}")
    (OUT / "speed.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
