"""Redis's CPU per page of the frontier's own calls, without Scrapy or HTTP: a quick, steady
measure of what a change to the Lua scripts costs or saves.

    python -m bench.frontier_calls [--hosts 300] [--pages 40] [--cap 2] [--workers 2] [--rounds 3]
    python -m bench.frontier_calls --hosts 1 --pages 20000 --cap 0      # the single-host site
    python -m bench.frontier_calls --autothrottle                       # AutoThrottle for the crawl

Crawls the link graph of bench/broad.py's site (``--hosts 1``: bench/speed.py's, 11 links a page)
with ``--workers`` frontiers of one process taking turns: each leases up to ``--prefetch``
requests (again once half are done, as the scheduler does), "fetches" ``--batch`` of them, and
pushes their new links with the acknowledgements (with ``--autothrottle``, and each page's latency,
1 µs, so that AutoThrottle's delay, a fraction of a µs, never holds a host back: what is measured
is its bookkeeping) in one call, every link first checked against
the worker's local first look and the seen feed (the scheduler's ``SeenCache``). The payloads are
the ``broad`` spider's (``request_to_json``), the dupefilter the packed layout of new crawls.
Prints, per round, Redis CPU µs per page (``INFO cpu``, user + sys, net of Redis's idle work)
and the scripts' execution µs per page (``INFO commandstats``: EVALSHA's), then the medians;
``--profile`` adds one run with every command logged, for each script's share.

Both are times, which move with the machine's speed from one minute to the next. ``--callgrind``
runs the throwaway ``redis-server`` under valgrind's callgrind instead and prints the
instructions Redis executed per page (user space: the scripts, the commands, the protocol; not
the kernel's network work): the same figure every time for the same code, the measure to
compare two versions of a script with.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import statistics
import time
from collections import deque
from typing import Any

import redis.asyncio as aioredis
from scrapy.settings import Settings

from bench.redis_cpu import CallgrindRedis, RedisCpu
from scrapy_frontier.dupefilter import DedupConfig, fingerprint_int64
from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.politeness import LatencySamples, SharedAutoThrottle, moves_pace
from scrapy_frontier.scheduler.join import SEEN_FEED_ENTRIES
from tests.servers import RedisServer

PORT = 8080
#: Seconds of idle Redis measured before the callgrind rounds.
IDLE_S = 5.0


def host_name(i: int, hosts: int) -> str:
    return "127.0.0.31" if hosts == 1 else f"127.1.{i // 254}.{i % 254 + 1}"


def link_graph(hosts: int, pages: int) -> list[list[tuple[int, int]]]:
    """Page (host i, page n) at index i * pages + n -> its links, as bench/broad.py and
    bench/speed.py generate them (not their random draws: the same shape)."""
    rng = random.Random(7)
    out = []
    for i in range(hosts):
        for n in range(pages):
            if hosts == 1:
                out.append([(0, (n + 1) % pages)] + [(0, rng.randrange(pages)) for _ in range(10)])
            else:
                out.append(
                    [(i, (n + 1) % pages), ((i + 1) % hosts, 0)]
                    + [(rng.randrange(hosts), rng.randrange(pages)) for _ in range(9)]
                )
    return out


class Worker:
    """One worker's frontier, lease book and local first look."""

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier
        self.local: deque[Any] = deque()
        self.seen: set[int] = set()
        self.to_ack: list[Any] = []
        self.to_push: list[Entry] = []
        self.samples = LatencySamples()
        self.pace: dict[str, tuple[float, bool]] = {}


async def crawl(
    url: str,
    hosts: int,
    pages: int,
    cap: int,
    workers: int,
    prefetch: int,
    batch: int,
    autothrottle: bool = False,
    rate: float = 0.0,
    paced: bool = False,
) -> int:
    """Crawl the graph from page 0 of host 0; returns the pages crawled. ``paced``: in real time,
    as the scheduler does (:func:`paced_turn`)."""
    client = aioredis.Redis.from_url(url)
    await client.flushdb()
    keys = Keys.for_spider(Settings(), "calls")
    graph = link_graph(hosts, pages)
    names = [host_name(i, hosts) for i in range(hosts)]
    dedup = DedupConfig()
    at = SharedAutoThrottle(4.0, start_delay=1e-6, min_delay=0.0, max_delay=60.0) if autothrottle else None
    crew = [
        Worker(
            Frontier(
                client,
                keys,
                f"w{k}",
                default_rate=rate,
                concurrency_cap=cap,
                dedup=dedup,
                seen_feed=SEEN_FEED_ENTRIES,
                autothrottle=at,
            )
        )
        for k in range(workers)
    ]
    # in the nodes index, as their heartbeats would put them (one worker alone uses no seen feed)
    await client.zadd(keys.nodes, {f"w{k}": 1 for k in range(workers)})

    def entry(h: int, n: int, depth: int) -> tuple[int, Entry]:
        url = f"http://{names[h]}:{PORT}/p{n}.html"
        digest = hashlib.sha1(url.encode()).digest()
        payload = json.dumps({"url": url, "callback": "parse", "meta": {"depth": depth}}, separators=(",", ":"))
        return fingerprint_int64(digest), Entry(digest.hex(), names[h], 0, payload)

    index = {name: i for i, name in enumerate(names)}
    _, first = entry(0, 0, 0)
    await crew[0].frontier.push([first])
    crew[0].seen.add(fingerprint_int64(bytes.fromhex(first.fingerprint)))
    crawled, idle_rounds = 0, 0

    def fetch(w: Worker, lease: Any) -> None:
        req = json.loads(lease.payload)
        host, _, path = req["url"][len("http://") :].partition("/")
        h, n = index[host.partition(":")[0]], int(path[1:-5])
        for lh, ln in graph[h * pages + n]:
            key, e = entry(lh, ln, req["meta"]["depth"] + 1)
            if key not in w.seen:
                w.seen.add(key)
                w.to_push.append(e)
        w.to_ack.append(lease)

    async def flush(w: Worker) -> None:
        if w.to_push or w.to_ack:
            now = time.monotonic()
            for lease in w.to_ack if at is not None else ():
                host = lease.field.rsplit(b"\t", 1)[-1].decode()
                w.samples.add(host, 1, now, urgent=moves_pace(1e-6 / at.target_concurrency, w.pace.get(host)))
            await w.frontier.push(w.to_push, w.to_ack, samples=w.samples.take(now))
            w.to_push, w.to_ack = [], []

    async def take(w: Worker) -> None:
        leases = await w.frontier.lease(prefetch - len(w.local))
        for lease in leases:
            if lease.send_in >= 0:
                w.pace[lease.field.rsplit(b"\t", 1)[-1].decode()] = (lease.interval, lease.strict)
        w.local += leases
        for blob in w.frontier.fed:
            w.seen.update(int(item) for item in blob.split(b","))
        w.frontier.fed = []

    if paced:
        crawled = await paced_crawl(crew, prefetch, batch, take, fetch, flush)
    while not paced and idle_rounds < 3:
        busy = False
        for w in crew:
            if len(w.local) <= prefetch // 2:
                await take(w)
            for _ in range(min(batch, len(w.local))):
                fetch(w, w.local.popleft())
                crawled += 1
                busy = True
            await flush(w)
        idle_rounds = 0 if busy else idle_rounds + 1
    await client.aclose()
    return crawled


async def paced_crawl(crew: list[Worker], prefetch: int, batch: int, take: Any, fetch: Any, flush: Any) -> int:
    """The workers in real time, as the scheduler runs them: a worker leases when it holds half
    its prefetch or less and its next poll is due (at once after a lease that took requests, else
    when the frontier says the next host is due, 5 ms at least); a request is fetched at its
    booked send time (``Lease.send_in``), up to ``batch`` a turn, then the links and
    acknowledgements go in one push. Ends after 2 s with nothing held and nothing leased."""
    loop = asyncio.get_running_loop()
    next_poll = [0.0] * len(crew)
    send_at: dict[int, float] = {}
    crawled, quiet_since = 0, loop.time()
    while loop.time() - quiet_since < 2.0:
        for k, w in enumerate(crew):
            now = loop.time()
            if len(w.local) <= prefetch // 2 and now >= next_poll[k]:
                before = len(w.local)
                await take(w)
                for lease in list(w.local)[before:]:
                    send_at[id(lease)] = now + max(0.0, lease.send_in)
                due = w.frontier.next_due_in
                next_poll[k] = now if len(w.local) > before else now + max(0.005, due if due >= 0 else 0.1)
            ready = [lease for lease in w.local if send_at.get(id(lease), 0.0) <= now][:batch]
            for lease in ready:
                w.local.remove(lease)
                send_at.pop(id(lease), None)
                fetch(w, lease)
                crawled += 1
            await flush(w)
            if w.local or ready:
                quiet_since = loop.time()
        await asyncio.sleep(0.002)
    return crawled


def crawl_with(url: str, args: argparse.Namespace) -> int:
    """:func:`crawl` with the command line's options; returns the pages crawled."""
    return asyncio.run(
        crawl(
            url,
            args.hosts,
            args.pages,
            args.cap,
            args.workers,
            args.prefetch,
            args.batch,
            args.autothrottle,
            args.rate,
            args.paced or args.rate > 0,
        )
    )


def run_once(url: str, args: argparse.Namespace, profile: bool = False) -> dict[str, Any]:
    cpu = RedisCpu(url, profile=profile)
    cpu.idle(1.0)
    cpu.start()
    pages = crawl_with(url, args)
    cpu.stop()
    fig = cpu.figures(pages)
    evalsha = fig["commandstats"].get("evalsha", {})
    fig["pages"] = pages
    fig["evalsha_us_per_page"] = round(evalsha.get("calls_per_page", 0) * evalsha.get("us_per_call", 0), 2)
    return fig


def callgrind_rounds(args: argparse.Namespace) -> None:
    """Instructions per page, raw and net of Redis's idle work (its cron: about 1.2 million
    instructions a second, measured first), which counts for a paced crawl's longer run."""
    server = CallgrindRedis()
    try:
        _, idle = server.instructions(lambda: time.sleep(IDLE_S))
        figures = []
        for r in range(args.rounds):
            start = time.monotonic()
            pages, ir = server.instructions(lambda: crawl_with(server.url, args))
            net = ir - idle / IDLE_S * (time.monotonic() - start)
            figures.append(net / pages)
            print(
                f"round {r + 1}: {pages} pages, Redis {ir / pages:,.0f} instructions/page, {net / pages:,.0f} net "
                f"of idle ({idle / IDLE_S:,.0f}/s)",
                flush=True,
            )
        print(f"median of {len(figures)}: Redis {statistics.median(figures):,.0f} instructions/page net of idle")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--pages", type=int, default=40, help="pages per host")
    parser.add_argument("--cap", type=int, default=2, help="requests in flight per host, cluster-wide (0: none)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prefetch", type=int, default=64, help="requests a worker holds (CONCURRENT_REQUESTS)")
    parser.add_argument("--batch", type=int, default=16, help="pages a worker fetches between two pushes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--autothrottle", action="store_true", help="AutoThrottle for the whole crawl, each page's latency sent"
    )
    parser.add_argument("--rate", type=float, default=0.0, help="DOMAIN_RATE_LIMIT (requests/second per host)")
    parser.add_argument(
        "--paced", action="store_true", help="in real time, requests sent at their booked times (implied by --rate)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="one more run with every command logged (SLOWLOG): each script's share"
    )
    parser.add_argument(
        "--redis", default=None, help="a Redis database URL (FLUSHED); default: a throwaway redis-server"
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="count Redis's instructions per page under valgrind (steady) instead of its CPU time",
    )
    args = parser.parse_args()
    if args.callgrind:
        callgrind_rounds(args)
        return
    server = None if args.redis else RedisServer()
    url = args.redis or server.url
    try:
        runs = []
        for r in range(args.rounds):
            fig = run_once(url, args)
            runs.append(fig)
            print(
                f"round {r + 1}: {fig['pages']} pages, Redis CPU {fig['redis_cpu_us_per_page_net']} µs/page net "
                f"({fig['redis_cpu_us_per_page']} raw), EVALSHA {fig['evalsha_us_per_page']} µs/page",
                flush=True,
            )
        print(
            f"median of {len(runs)}: Redis CPU {statistics.median(f['redis_cpu_us_per_page_net'] for f in runs)} "
            "µs/page net, "
            f"EVALSHA {statistics.median(f['evalsha_us_per_page'] for f in runs)} µs/page"
        )
        for name, st in runs[-1]["commandstats"].items():
            print(f"  {name:<16} {st['calls_per_page']:>8} calls/page {st['us_per_call']:>9} µs/call")
        if args.profile:
            fig = run_once(url, args, profile=True)
            print("profiled run (every command logged):")
            for name, st in fig["profile"].items():
                print(
                    f"  {name:<26} {st['calls_per_page']:>7} calls/page {st['us_per_call']:>9} µs/call "
                    f"{st['us_per_page']:>7} µs/page {st['share']:.0%}"
                )
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    main()
