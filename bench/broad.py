"""A broad crawl: many hosts, a cap on the requests in flight per host, plain Scrapy against this
project's frontier with one and two workers.

    python -m bench.broad [--hosts 300] [--pages 40] [--cap 2] [--rounds 3]

Generates a static site of HOSTS hosts (127.1.0.1 and on) with PAGES pages each (about 3 KB and
11 links: the next page of its own host, page 0 of the next host, and 9 random pages of random
hosts, so a crawl from host 0's first page reaches every page), served by one nginx process
listening on every host's address, each host from its own directory (``root .../$server_addr``).
Every row crawls it with the ``broad`` spider (bench/broad_spider.py), the same settings as
bench/speed.py and at most CAP requests in flight per host: ``CONCURRENT_REQUESTS_PER_DOMAIN``
for plain Scrapy, and ``DOMAIN_CONCURRENCY`` (across the cluster) for the frontier. The kinds
are interleaved, round after round, and the medians reported. Also reported per run: Redis CPU
per page (``INFO cpu``, user + sys, from the start URL to the last worker's exit) and the share of
each script and command in it (``INFO commandstats``).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench import speed
from bench.speed import OUT
from tests.loopback import free_port, wait_port
from tests.servers import RedisServer

#: (name, mode, workers), the first the baseline of the ratios.
KINDS = (
    ("plain Scrapy", "plain", 1),
    ("this project, 1 worker", "frontier", 1),
    ("this project, 2 workers", "frontier", 2),
)


def host(i: int) -> str:
    """Address of host ``i`` (0-based): 127.1.0.1, 127.1.0.2, ..., never a .0 or .255."""
    return f"127.1.{i // 254}.{i % 254 + 1}"


def make_site(hosts: int, pages: int, port: int) -> Path:
    """Write (once per size and port) ``bench/out/broad<hosts>x<pages>-<port>/<address>/p<n>.html``."""
    site = OUT / f"broad{hosts}x{pages}-{port}"
    if (site / host(hosts - 1) / f"p{pages - 1}.html").exists():
        return site
    for old in OUT.glob("broad*x*-*"):
        shutil.rmtree(old, ignore_errors=True)
    rng = random.Random(7)
    filler = " ".join(["lorem ipsum dolor sit amet"] * 60)
    for i in range(hosts):
        d = site / host(i)
        d.mkdir(parents=True)
        for n in range(pages):
            links = [(i, (n + 1) % pages), ((i + 1) % hosts, 0)] + [
                (rng.randrange(hosts), rng.randrange(pages)) for _ in range(9)
            ]
            body = "".join(f'<a href="http://{host(h)}:{port}/p{k}.html">page {k} of host {h}</a> ' for h, k in links)
            (d / f"p{n}.html").write_text(
                f"<html><head><title>Host {i} page {n}</title></head><body><h1>Host {i} page "
                f"{n}</h1><p>{filler}</p>{body}</body></html>"
            )
    return site


class BroadNginx(speed.Nginx):
    """nginx listening on ``port`` of the first ``hosts`` addresses, each served from its own directory."""

    def __init__(self, site: Path, hosts: int, port: int) -> None:
        self.port = port
        prefix = OUT / "nginx-broad"
        prefix.mkdir(parents=True, exist_ok=True)
        listens = "".join(f"listen {host(i)}:{port}; " for i in range(hosts))
        conf = prefix / "nginx.conf"
        conf.write_text(
            f"daemon off; worker_processes 1; pid {prefix}/nginx.pid; error_log {prefix}/error.log;\n"
            f"events {{ worker_connections 4096; }}\n"
            f"http {{ access_log off; types {{ text/html html; }} default_type text/html;\n"
            f"  server {{ {listens} root {site}/$server_addr; }} }}\n"
        )
        if not shutil.which("nginx"):
            raise SystemExit("nginx is not installed: apt-get install nginx-light (or nginx)")
        self.proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(prefix)])
        wait_port(host(0), port)
        wait_port(host(hosts - 1), port)
        self.url = f"http://{host(0)}:{port}/"


def crawl(
    name: str,
    mode: str,
    workers: int,
    start_url: str,
    redis_url: str,
    cap: int,
    timeout: float,
    profile: bool = False,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One run of a kind: bench.speed.crawl's figures (with Redis's, frontier runs); ``settings``
    over the benchmark's."""
    extra = {"SPIDER_MODULES": "bench.broad_spider", "CONCURRENT_REQUESTS_PER_DOMAIN": str(cap)}
    if mode == "frontier":
        extra["DOMAIN_CONCURRENCY"] = str(cap)
    extra.update(settings or {})
    return speed.crawl(
        name.replace(" ", "").replace(",", "-"),
        mode,
        workers,
        start_url,
        redis_url=redis_url,
        timeout=timeout,
        spider="broad",
        settings=extra,
        profile=profile,
    )


def run(
    hosts: int, pages: int, cap: int, rounds: int, redis_url: str | None = None, profile: bool = True
) -> dict[str, Any]:
    """Every kind ``rounds`` times, interleaved, then (``profile``) one profiled two-worker run.

    Returns ``{"runs": {name: [run, ...]}, "median": {name: run}, "ratio": {name: x}, "profiled": run, ...}``.
    """
    profiled: dict[str, Any] = {}
    port = free_port(host(0))
    site = make_site(hosts, pages, port)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in KINDS}
    with BroadNginx(site, hosts, port) as server:
        throwaway = None if redis_url else RedisServer()
        url = redis_url or throwaway.url
        try:
            for _ in range(rounds):
                for name, mode, workers in KINDS:
                    r = crawl(
                        name, mode, workers, server.url + "p0.html", url, cap, timeout=max(600.0, hosts * pages / 5)
                    )
                    runs[name].append(r)
                    extra = f", Redis {r['redis_cpu_us_per_page']} µs/page" if "redis_cpu_us_per_page" in r else ""
                    print(
                        f"broad {name}: {r['pages']} pages in {r['seconds']} s = {r['pages_per_s']} pages/s{extra} "
                        f"(load {r['load_before']} -> {r['load_after']})",
                        flush=True,
                    )
            if profile:
                # where Redis's time goes, per script: one more two-worker run, every command logged
                profiled = crawl(
                    "profiled",
                    "frontier",
                    2,
                    server.url + "p0.html",
                    url,
                    cap,
                    timeout=max(600.0, hosts * pages / 5),
                    profile=True,
                )
                print(
                    f"broad profiled run: {profiled['logged_us_per_page']} µs/page of commands logged: "
                    + ", ".join(f"{k} {v['us_per_page']}" for k, v in list(profiled["profile"].items())[:6]),
                    flush=True,
                )
        finally:
            if throwaway:
                throwaway.stop()
    median = {}
    for name, kind in runs.items():
        ordered = sorted(kind, key=lambda r: r["pages_per_s"] or 0)
        median[name] = ordered[(len(ordered) - 1) // 2]
    base = median["plain Scrapy"]["pages_per_s"]
    ratios = {
        name: [round(r["pages_per_s"] / b["pages_per_s"], 2) for r, b in zip(kind, runs["plain Scrapy"])]
        for name, kind in runs.items()
    }
    return {
        "hosts": hosts,
        "pages_per_host": pages,
        "cap": cap,
        "rounds": rounds,
        "runs": runs,
        "median": median,
        "ratio": {name: round(m["pages_per_s"] / base, 2) for name, m in median.items()},
        "ratio_per_round": ratios,
        "ratio_median_of_rounds": {name: statistics.median(v) for name, v in ratios.items()},
        "profiled": profiled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--cap", type=int, default=2, help="requests in flight per host")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled run (per-script Redis time)")
    parser.add_argument(
        "--redis",
        default=None,
        help="a Redis database URL (its broad:* keys are deleted); default: a throwaway redis-server",
    )
    args = parser.parse_args()
    result = run(args.hosts, args.pages, args.cap, args.rounds, args.redis, not args.no_profile)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "broad.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("hosts", "pages_per_host", "cap", "ratio", "ratio_per_round")}))
    for name, m in result["median"].items():
        print(
            name,
            {k: m.get(k) for k in ("pages", "pages_per_s", "worker_cpu_ms_per_page", "redis_cpu_us_per_page")},
            json.dumps(m.get("commands")),
        )


if __name__ == "__main__":
    main()
