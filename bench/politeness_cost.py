"""What politeness costs Redis: the broad crawl (bench/broad.py: HOSTS hosts of PAGES pages, CAP
requests in flight per host, two workers, item pipelines off) with no rate and no AutoThrottle,
with AutoThrottle for the whole crawl, and with ``DOMAIN_RATE_LIMIT`` and AutoThrottle.

    python -m bench.politeness_cost [--hosts 300] [--pages 40] [--cap 2] [--rate 2] [--rounds 2]
    python -m bench.politeness_cost --callgrind

Prints, per kind, the median of the rounds: pages/s, Redis CPU per page (µs, ``INFO cpu``, less
Redis's own idle work over the run: a rate-limited crawl runs longer) and Redis commands per page
(``INFO commandstats``), and each kind's CPU per page against the first kind's (the target: at
most 1.5 with a rate and AutoThrottle); each run also prints the workers' frontier calls and
politeness counts per page (``frontier/calls/*``, ``politeness/*`` stats: a round trip is a
wake-up of Redis, which costs it more than most scripts). Writes bench/out/politeness_cost.json.

``--callgrind`` runs each kind once against a Redis under valgrind's callgrind
(:class:`bench.redis_cpu.CallgrindRedis`) and prints the instructions Redis executed per page, net
of its idle work, and their ratios: a count that hardly moves from one run to the next, where the
CPU time moves with the machine (the workers, nginx and Redis share its cores). It leaves out the
kernel's part (the network), and Redis runs many times slower, so the workers' calls are somewhat
fewer and larger than at full speed. Needs valgrind.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench import broad
from bench.redis_cpu import CallgrindRedis
from bench.speed import OUT
from tests.loopback import free_port
from tests.servers import RedisServer


def kinds(rate: float) -> tuple[tuple[str, dict[str, str]], ...]:
    """(name, settings), the first the baseline of the ratios."""
    return (
        ("no rate, no AutoThrottle", {"AUTOTHROTTLE_ENABLED": "False"}),
        ("AutoThrottle", {"AUTOTHROTTLE_ENABLED": "True"}),
        (
            f"DOMAIN_RATE_LIMIT={rate:g} and AutoThrottle",
            {"AUTOTHROTTLE_ENABLED": "True", "DOMAIN_RATE_LIMIT": str(rate)},
        ),
    )


def commands_per_page(run: dict[str, Any]) -> float:
    """Redis commands per page (scripts count one each), from the run's commandstats."""
    return round(sum(c["calls_per_page"] for c in run.get("commandstats", {}).values()), 1)


def instructions(args: argparse.Namespace, site_url: str) -> None:
    """Each kind once against a callgrind Redis: instructions per page net of idle, and ratios."""
    redis = CallgrindRedis()
    try:
        _, idle = redis.instructions(lambda: time.sleep(5.0))
        per_page: dict[str, float] = {}
        for name, settings in kinds(args.rate):
            start = time.monotonic()
            r, count = redis.instructions(
                lambda settings=settings, name=name: broad.crawl(
                    name, "frontier", 2, site_url, redis.url, args.cap, 1800, settings=settings
                )
            )
            per_page[name] = (count - idle / 5.0 * (time.monotonic() - start)) / r["pages"]
            base = next(iter(per_page.values()))
            print(
                f"{name}: {r['pages']} pages, {r['pages_per_s']} pages/s, Redis {per_page[name]:,.0f} "
                f"instructions/page net of idle ({per_page[name] / base:.2f}x)",
                flush=True,
            )
    finally:
        redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--cap", type=int, default=2, help="requests in flight per host")
    parser.add_argument("--rate", type=float, default=2.0, help="DOMAIN_RATE_LIMIT of the rate-limited kind")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--callgrind", action="store_true", help="count Redis's instructions per page under valgrind instead"
    )
    args = parser.parse_args()
    port = free_port(broad.host(0))
    site = broad.make_site(args.hosts, args.pages, port)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in kinds(args.rate)}
    timeout = max(600.0, args.hosts * args.pages / 5)
    with broad.BroadNginx(site, args.hosts, port) as server:
        if args.callgrind:
            instructions(args, server.url + "p0.html")
            return
        redis = RedisServer()
        try:
            for _ in range(args.rounds):
                for name, settings in kinds(args.rate):
                    r = broad.crawl(
                        name, "frontier", 2, server.url + "p0.html", redis.url, args.cap, timeout, settings=settings
                    )
                    runs[name].append(r)
                    print(
                        f"{name}: {r['pages']} pages, {r['pages_per_s']} pages/s, Redis "
                        f"{r['redis_cpu_us_per_page_net']} µs/page net of idle ({r['redis_cpu_us_per_page']} in "
                        f"all), {commands_per_page(r)} commands/page; "
                        + ", ".join(f"{k} {v / r['pages']:.4f}" for k, v in r.get("calls", {}).items()),
                        flush=True,
                    )
        finally:
            redis.stop()
    median = {name: statistics.median(r["redis_cpu_us_per_page_net"] for r in rs) for name, rs in runs.items()}
    base = next(iter(median.values()))
    result = {
        "hosts": args.hosts,
        "pages_per_host": args.pages,
        "cap": args.cap,
        "rate": args.rate,
        "runs": runs,
        "redis_cpu_us_per_page": median,
        "against_no_politeness": {name: round(v / base, 2) for name, v in median.items()},
        "pages_per_s": {name: round(statistics.median(r["pages_per_s"] for r in rs), 1) for name, rs in runs.items()},
        "commands_per_page": {
            name: round(statistics.median(commands_per_page(r) for r in rs), 2) for name, rs in runs.items()
        },
        "calls_per_page": {
            name: {
                k: round(statistics.median(r["calls"].get(k, 0) / r["pages"] for r in rs), 4) for k in rs[0]["calls"]
            }
            for name, rs in runs.items()
        },
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "politeness_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    for name in median:
        print(
            f"{name}: {result['pages_per_s'][name]} pages/s, Redis {median[name]:.1f} µs/page net of idle "
            f"({result['against_no_politeness'][name]}x), {result['commands_per_page'][name]} commands/page"
        )


if __name__ == "__main__":
    main()
