"""Politeness shared by every worker: rates, live overrides and Retry-After, measured by a test
server that records the time of every request."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scrapy_frontier.downloadermiddlewares.robotstxt import RetrySchedule, cached_verdict
from tests.conftest import ROOT
from tests.loopback import free_port, wait_port

FAST = {"MAX_IDLE_TIME_BEFORE_CLOSE": "2", "SPIDER_MODULES": "crawler.spiders", "ROBOTSTXT_OBEY": "False"}


class RecordingServer:
    def __init__(
        self, host: str, log: Path, pages: int, robots: str | None = None, delay_ms: int = 0, slots: int = 0
    ) -> None:
        self.port = free_port(host)
        self.log = log
        self.url = f"http://{host}:{self.port}"
        env = {**os.environ, "SITE_PAGES": str(pages)}
        if robots:
            env["ROBOTS_TXT"] = robots
        if delay_ms:
            env["SITE_DELAY_MS"] = str(delay_ms)
        if slots:
            env["SITE_SLOTS"] = str(slots)
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "flaky_server.py"), host, str(self.port), str(log)], env=env
        )
        wait_port(host, self.port)

    def times(self, prefix: str = "/") -> list[float]:
        out = []
        for line in (self.log.read_text() if self.log.exists() else "").splitlines():
            t, path = line.split(" ", 1)
            if path.startswith(prefix):
                out.append(float(t))
        return sorted(out)

    def load(self, since: float = 0.0, until: float = float("inf")) -> tuple[float, float, float]:
        """The /site/ requests' (mean number in the server at once, median latency in seconds,
        pages answered per second), from the first arrival to the last answer, of those that
        arrived from ``since`` to ``until`` (Unix times)."""
        arrived: dict[str, float] = {}
        spans = []
        for line in self.log.read_text().splitlines():
            t, rest = line.split(" ", 1)
            if rest.startswith("/site/"):
                arrived.setdefault(rest, float(t))
            elif rest.startswith("END /site/"):
                if since <= arrived[rest.removeprefix("END ")] < until:
                    spans.append((arrived[rest.removeprefix("END ")], float(t)))
        start, end = min(a for a, _ in spans), max(b for _, b in spans)
        latencies = sorted(b - a for a, b in spans)
        return sum(latencies) / (end - start), latencies[len(latencies) // 2], len(spans) / (end - start)

    def most_at_once(self) -> int:
        """The largest number of /site/ requests being answered at the same time."""
        events = []
        for line in self.log.read_text().splitlines():
            t, rest = line.split(" ", 1)
            if rest.startswith("/site/"):
                events.append((float(t), 1))
            elif rest.startswith("END /site/"):
                events.append((float(t), -1))
        level = best = 0
        for _, step in sorted(events, key=lambda e: (e[0], e[1])):
            level += step
            best = max(best, level)
        return best

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def recording_server(tmp_path):
    servers = []

    def start(
        host: str, pages: int = 60, robots: str | None = None, delay_ms: int = 0, slots: int = 0
    ) -> RecordingServer:
        servers.append(RecordingServer(host, tmp_path / f"{host}.log", pages, robots, delay_ms, slots))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def max_in_window(times: list[float], window: float = 1.0) -> int:
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def crawled(start_workers, redis_url, redis_client, n: int, settings: dict, *start_urls: str) -> list:
    """``n`` workers of ``site`` with ``settings``, given ``start_urls``, run to their end (exit 0)."""
    workers = start_workers(n, settings=settings, env={"REDIS_URL": redis_url})
    redis_client.lpush("site:start_urls", *start_urls)
    for w in workers:
        assert w.wait(120) == 0, w.output[-3000:]
    return workers


#: The project's own politeness (crawler/settings.py: AutoThrottle on, target concurrency 4, no rate;
#: DOMAIN_CONCURRENCY unset: one worker's CONCURRENT_REQUESTS_PER_DOMAIN, 8, for the whole crawl).
PROJECT_DEFAULTS = {**FAST, "DOMAIN_CONCURRENCY": "", "AUTOTHROTTLE_ENABLED": "True"}


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("shards", ["1", "4"])
def test_three_workers_send_a_host_no_more_at_once_than_one(
    shards, recording_server, start_workers, redis_url, redis_client
):
    """No politeness setting (AutoThrottle off too): 3 workers keep at most 8 requests in a slow
    server at once, one worker's CONCURRENT_REQUESTS_PER_DOMAIN, not 3 times that; a host its cap
    holds is taken again as soon as a lease of it ends, sharded frontier included."""
    server = recording_server("127.0.0.27", pages=150, delay_ms=200)
    settings = {**FAST, "DOMAIN_CONCURRENCY": "", "FRONTIER_SHARDS": shards}  # "": unset, its default
    crawled(start_workers, redis_url, redis_client, 3, settings, f"{server.url}/site/0")
    load, p50, speed = server.load()
    print(
        f"FIGURES no politeness setting, 3 workers, {shards} shard(s): at most {server.most_at_once()} in the "
        f"server at once, {load:.2f} on average, {speed:.1f} pages/s"
    )
    assert len(server.times("/site/")) == 150
    assert server.most_at_once() <= 8
    # 8 at a time, 0.2 s each, less each page's processing while its lease is held: not a host
    # parked at its cap until a timeout
    assert speed >= 0.4 * 8 / 0.2


@pytest.mark.timing
@pytest.mark.slow
def test_autothrottle_holds_the_whole_crawl_to_one_workers_load(
    recording_server, start_workers, redis_url, redis_client
):
    """A server that works on 2 requests at once (80 ms each) and queues the rest, so its latency
    grows with its load; the project's settings (AutoThrottle, target concurrency 4), the same
    pages crawled by 1 worker and by 3: the 3 put no more load on it (requests in it at once,
    their median latency) than one, within 25 %, and go at least 0.9 times as fast."""
    figures = []
    for n, host in ((1, "127.0.0.21"), (3, "127.0.0.22")):
        server = recording_server(host, pages=160, delay_ms=80, slots=2)
        crawled(start_workers, redis_url, redis_client, n, PROJECT_DEFAULTS, f"{server.url}/site/0")
        assert len(server.times("/site/")) == 160
        figures.append(server.load())
    (one_load, one_p50, one_speed), (three_load, three_p50, three_speed) = figures
    print(
        f"FIGURES AutoThrottle, 1 worker: {one_load:.2f} in the server at once, latency p50 {one_p50:.3f}s, "
        f"{one_speed:.1f} pages/s; 3 workers: {three_load:.2f}, {three_p50:.3f}s, {three_speed:.1f} pages/s"
    )
    assert three_load <= 1.25 * one_load
    assert three_p50 <= 1.25 * one_p50
    assert three_speed >= 0.9 * one_speed


@pytest.mark.timing
@pytest.mark.slow
def test_every_worker_slows_down_when_the_server_does(recording_server, start_workers, redis_url, redis_client):
    """3 workers, AutoThrottle on, and a server (2 at once, 40 ms each) whose service time triples
    mid-crawl: from a second later, the load on it (requests in it at once) is what AutoThrottle
    aims at (its target concurrency, 4, within 25 %), as one AutoThrottle would bring it back (the
    3 workers sending as before would pile up 3 times the requests): the delay they share grew."""
    server = recording_server("127.0.0.25", pages=400, delay_ms=40, slots=2)
    workers = start_workers(3, settings=PROJECT_DEFAULTS, env={"REDIS_URL": redis_url})
    redis_client.lpush("site:start_urls", f"{server.url}/site/0")
    deadline = time.monotonic() + 60
    while len(server.times("/site/")) < 150 and time.monotonic() < deadline:
        time.sleep(0.05)
    before = float(redis_client.hget("site:politeness:@at_delay", "127.0.0.25")) / 1e6
    changed = time.time()
    Path(f"{server.log}.slower").write_text("3")
    time.sleep(1.5)
    after = float(redis_client.hget("site:politeness:@at_delay", "127.0.0.25")) / 1e6
    for w in workers:
        assert w.wait(180) == 0, w.output[-3000:]
    load_before, p50_before, speed_before = server.load(until=changed)
    load, p50, speed = server.load(since=changed + 1)
    print(
        f"FIGURES server 3x slower mid-crawl, 3 workers: shared delay {before * 1000:.0f} -> {after * 1000:.0f} ms; "
        f"before: {load_before:.2f} in the server at once, latency p50 {p50_before:.3f}s, {speed_before:.1f} pages/s; "
        f"from 1 s after: {load:.2f}, {p50:.3f}s, {speed:.1f} pages/s"
    )
    assert after > before
    assert load <= 1.25 * 4


@pytest.mark.slow
@pytest.mark.parametrize("target", ["4", "16"])
def test_a_rate_holds_with_autothrottle_on_and_across_redirects(
    target, recording_server, start_workers, redis_url, redis_client
):
    """DOMAIN_RATE_LIMIT=20 with AutoThrottle on, pages answering in 0.3 s, 2 workers, and links
    that redirect to a second host limited to 1/s: neither host gets more than its rate and one
    (docs/politeness.md's burst) in any 1-s window. Each request leaves at the time booked for it
    (a redirect's against its target host), not after waiting in a worker's download slot. At a
    target concurrency of 4, AutoThrottle's rate (4 / 0.3 s) is the stricter; at 16, the 20/s."""
    site = recording_server("127.0.0.23", pages=120, delay_ms=300)
    redirected = recording_server("127.0.0.24", pages=8)
    settings = {
        **PROJECT_DEFAULTS,
        "AUTOTHROTTLE_TARGET_CONCURRENCY": target,
        "DOMAIN_RATE_LIMIT": "20",
        "DOMAIN_RATE_LIMITS": '{"127.0.0.24": 1}',
    }
    workers = start_workers(2, settings=settings, env={"REDIS_URL": redis_url})
    redis_client.lpush(
        "site:start_urls",
        f"{site.url}/site/0",
        *(f"{site.url}/goto/127.0.0.24:{redirected.port}/site/{k}" for k in range(4)),
    )
    for w in workers:
        assert w.wait(180) == 0, w.output[-3000:]
    on_site, on_target = site.times("/site/"), redirected.times("/site/")
    print(
        f"FIGURES rate 20/s with AutoThrottle (target {target}): {len(on_site)} requests, most in any 1 s: "
        f"{max_in_window(on_site)}, "
        f"gaps under 20 ms: {sum(1 for a, b in zip(on_site, on_site[1:]) if b - a < 0.02)}; redirect target at "
        f"1/s: {len(on_target)} requests, most in any 1 s: {max_in_window(on_target)}"
    )
    assert len(on_site) == 120 and len(on_target) == 8
    assert max_in_window(on_site) <= 21
    assert max_in_window(on_target) <= 2


@pytest.mark.core
@pytest.mark.slow
def test_three_workers_share_one_rate_limit(recording_server, start_workers, redis_url, redis_client):
    server = recording_server("127.0.0.11", pages=60)
    settings = {**FAST, "DOMAIN_RATE_LIMIT": "5"}
    workers = crawled(start_workers, redis_url, redis_client, 3, settings, f"{server.url}/site/0")
    times = server.times("/site/")
    print(
        f"FIGURES rate=5/s: {len(times)} requests in {times[-1] - times[0]:.1f}s, most in any 1 s window: "
        f"{max_in_window(times)}"
    )
    assert len(times) == 60
    assert max_in_window(times) <= 6  # 5 per second, one token of burst
    assert sum(1 for w in workers if w.stat("item_scraped_count")) >= 2


@pytest.mark.slow
def test_live_override_reaches_every_worker_within_5_seconds(recording_server, start_workers, redis_url, redis_client):
    server = recording_server("127.0.0.12", pages=400)
    workers = start_workers(2, settings={**FAST, "DOMAIN_RATE_LIMIT": "20"}, env={"REDIS_URL": redis_url})
    redis_client.lpush("site:start_urls", f"{server.url}/site/0")
    time.sleep(3)
    set_at = time.time()
    redis_client.hset("site:rates", "127.0.0.12", 1)
    time.sleep(10)
    redis_client.hset("site:rates", "127.0.0.12", 100)
    for w in workers:
        assert w.wait(120) == 0, w.output[-3000:]
    times = server.times("/site/")
    before = [t for t in times if set_at - 3 < t < set_at]
    after = [t for t in times if set_at + 5 <= t <= set_at + 10]
    print(
        f"FIGURES override 20/s -> 1/s: {len(before)} requests in the 3 s before, {len(after)} in the 5 s from 5 s "
        f"after; most in 1 s then: {max_in_window(after) if after else 0}"
    )
    assert len(before) >= 20
    assert len(after) <= 7 and (not after or max_in_window(after) <= 2)


@pytest.mark.parametrize("rate", ["40", "0"])
def test_retry_after_pauses_the_host_for_every_worker(rate, recording_server, start_workers, redis_url, redis_client):
    server = recording_server("127.0.0.13", pages=200)
    settings = {
        **FAST,
        "DOMAIN_RATE_LIMIT": rate,
        "RETRY_BACKOFF_BASE": "0.05",
        "CONCURRENT_REQUESTS": "4",
        "DOWNLOAD_DELAY": "0.02",
    }
    workers = start_workers(2, settings=settings, env={"REDIS_URL": redis_url})
    redis_client.lpush("site:start_urls", f"{server.url}/site/0")
    time.sleep(1.5)
    redis_client.lpush("site:start_urls", f"{server.url}/retry-after/3/x")
    for w in workers:
        assert w.wait(120) == 0, w.output[-3000:]
    hit = server.times("/retry-after/")
    assert len(hit) == 2, "the 429 was not retried"
    first = hit[0]
    # Requests already on the wire when the 429 left the server cannot be called back: allow
    # 0.3 s for the answer to reach its worker, and the news the others (pub/sub).
    on_the_wire = [t for t in server.times("/") if first < t < first + 0.3]
    during = [t for t in server.times("/") if first + 0.3 <= t < first + 2.95]
    print(
        f"FIGURES Retry-After 3 (DOMAIN_RATE_LIMIT={rate}): {len(on_the_wire)} requests already on the wire, "
        f"{len(during)} in the rest of the 3 s; retry after {hit[1] - first:.2f}s"
    )
    assert during == []
    assert sum(w.stat("politeness/slowed/429") for w in workers) == 1
    assert any("Slowing 127.0.0.13 down for every worker (HTTP 429)" in w.output for w in workers)


@pytest.mark.slow
def test_robots_txt_fetched_once_and_its_crawl_delay_shared(recording_server, start_workers, redis_url, redis_client):
    server = recording_server("127.0.0.14", pages=7, robots="User-agent: *\nDisallow: /private\nCrawl-delay: 2\n")
    settings = {**FAST, "ROBOTSTXT_OBEY": "True"}
    workers = crawled(start_workers, redis_url, redis_client, 2, settings, f"{server.url}/site/0")
    assert server.times("/private") == []
    assert len(server.times("/robots.txt")) == 1
    times = server.times("/")
    gaps = [b - a for a, b in zip(times, times[1:])]
    print(f"FIGURES Crawl-delay 2: {len(times)} requests (robots.txt included), smallest gap {min(gaps):.2f}s")
    assert len(server.times("/site/")) == 7
    assert min(gaps) >= 1.9
    assert sum(w.stat("robotstxt/forbidden") for w in workers) == 7


def test_concurrency_cap_holds_across_workers(recording_server, start_workers, redis_url, redis_client):
    server = recording_server("127.0.0.15", pages=30, delay_ms=300)
    settings = {**FAST, "DOMAIN_CONCURRENCY": "2", "CONCURRENT_REQUESTS": "8", "SCHEDULER_PERSIST": "True"}
    crawled(start_workers, redis_url, redis_client, 2, settings, f"{server.url}/site/0")
    print(f"FIGURES DOMAIN_CONCURRENCY=2, two workers of 8: most requests at once {server.most_at_once()}")
    assert len(server.times("/site/")) == 30
    assert server.most_at_once() == 2
    assert redis_client.hget("site:politeness:@inflight", "127.0.0.15") is None  # every lease counted back
    assert not redis_client.exists("site:politeness:127.0.0.15")  # a host without a rate has no politeness hash


def test_robots_txt_503_holds_the_host_until_it_answers_and_404_allows_all(
    recording_server, start_workers, redis_url, redis_client
):
    """RFC 9309: a 5xx robots.txt (section 2.3.1.4) means no page of the host, for every worker,
    until it answers, retried on a schedule; a 4xx (2.3.1.3) means no rules. The held host is
    reached by a redirect from a start URL (its robots.txt is fetched all the same)."""
    held = recording_server("127.0.0.18", pages=8, robots="User-agent: *\nDisallow: /private\n")
    status = Path(f"{held.log}.robots-status")
    status.write_text("503")
    open_site = recording_server("127.0.0.17", pages=4)  # no robots.txt: 404
    settings = {**FAST, "ROBOTSTXT_OBEY": "True", "ROBOTSTXT_RETRY_DELAY": "0.5", "ROBOTSTXT_RETRY_DELAY_MAX": "1"}
    workers = start_workers(2, settings=settings, env={"REDIS_URL": redis_url})
    redis_client.lpush(
        "site:start_urls", f"{open_site.url}/goto/127.0.0.18:{held.port}/site/0", f"{open_site.url}/site/0"
    )
    deadline = time.monotonic() + 30
    while len(held.times("/robots.txt")) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    answered_at = time.time()
    status.unlink()
    for w in workers:
        assert w.wait(60) == 0, w.output[-3000:]
    tries = held.times("/robots.txt")
    pages = held.times("/site/")
    print(
        f"FIGURES robots.txt 503: {len([t for t in tries if t < answered_at])} tries before it answered 200, "
        f"{len(pages)} pages fetched, the first {pages[0] - answered_at:.2f}s after"
    )
    assert len([t for t in tries if t < answered_at]) >= 3
    assert pages and min(pages) > answered_at  # not one page while robots.txt answered 503
    assert sorted(held.log.read_text().count(f" /site/{n}\n") for n in range(8)) == [1] * 8
    assert held.times("/private") == []
    assert len(open_site.times("/site/")) == 4 and open_site.times("/private") == []
    assert sum(w.stat("robotstxt/unreachable") for w in workers) == 1
    assert sum(w.stat("robotstxt/reachable_again") for w in workers) == 1
    assert sum(w.output.count("robots.txt of 127.0.0.18") for w in workers) == 2  # one line each way


def test_an_unreachable_robots_txt_is_tried_again_less_and_less_often_then_counts_as_absent():
    """RFC 9309, 2.3.1.4: complete disallow while unreachable, tried again on a doubling schedule up
    to a cap (a longer Retry-After is obeyed up to the cap); after 30 days, no rules."""
    schedule = RetrySchedule(first=60, longest=3600, limit=30 * 86_400, ttl=86_400)
    state: dict[bytes, bytes] = {}
    now, waits = 1_000_000.0, []
    for _ in range(9):
        fields, ttl = schedule.failed(state, 503, now)
        assert ttl >= 31 * 86_400 and cached_verdict(enc(fields), now + 1) == ("held", fields["retry_at"])
        waits.append(fields["retry_at"] - now)
        now = fields["retry_at"]
        assert cached_verdict(enc(fields), now) == ("due", 0.0)
        state = enc(fields)
    assert waits == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
    assert schedule.failed({}, 0, now, retry_after=600)[0]["retry_at"] == now + 600
    assert schedule.failed({}, 0, now, retry_after=99_999)[0]["retry_at"] == now + 3600
    since = float(state[b"since"])
    fields, _ = schedule.failed(state, 500, since + 30 * 86_400)
    assert fields["given_up"] == 1 and fields["body"] == b""  # no rules, fetched again after a day
    assert cached_verdict(enc(fields), since + 30 * 86_400 + 10) == ("rules", 0.0)
    assert cached_verdict(enc(fields), since + 31 * 86_400) == ("due", 0.0)
    assert schedule.failed(enc(fields), 500, since + 31 * 86_400)[0]["given_up"] == 1  # still unreachable
    assert cached_verdict({b"status": b"200", b"body": b"User-agent: *"}, now) == ("rules", 0.0)


def enc(fields: dict) -> dict[bytes, bytes]:
    """``fields`` as Redis gives them back."""
    return {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in fields.items()}


def test_sessions_follow_the_host_across_workers(recording_server, start_workers, redis_url, redis_client):
    """A site whose member pages answer 403 without the cookie /login sets, and a page that sets a
    cookie and redirects to itself, crawled by 2 workers: the cookie one worker got is sent by
    both (COOKIES_SHARED, the default), no page answers 403, and every page is fetched once."""
    server = recording_server("127.0.0.26", pages=40, delay_ms=100)
    # two requests at a time each, so that both workers take pages
    settings = {**FAST, "DOMAIN_CONCURRENCY": "0", "FRONTIER_PREFETCH": "2", "CONCURRENT_REQUESTS": "2"}
    workers = crawled(start_workers, redis_url, redis_client, 2, settings, f"{server.url}/login")
    members = [path for path in (line.split(" ", 1)[1] for line in server.log.read_text().splitlines())]
    members = [p for p in members if p.startswith("/members/")]
    print(
        f"FIGURES shared cookies: {len(members)} member pages fetched, 403s: "
        f"{[w.stat('downloader/response_status_count/403') for w in workers]}, 200s per worker: "
        f"{[w.stat('downloader/response_status_count/200') for w in workers]}, profile: {server.times('/profile')}"
    )
    assert sorted(members) == sorted(f"/members/{n}" for n in range(40)), members
    assert [w.stat("downloader/response_status_count/403") for w in workers] == [0, 0]
    assert all(w.stat("downloader/response_status_count/200") > 0 for w in workers)
    assert len(server.times("/profile")) == 2  # the redirect that sets the cookie, then the page
    assert sum(w.stat("cookies/shared") for w in workers) >= 2


def test_shared_cookies_read_the_jar_once_however_many_requests_ask_and_stop_at_close(redis_url):
    """The first requests of a worker all wait for the shared jar: one watcher reads it and
    follows the other workers' changes, and the spider's close stops it."""
    import asyncio

    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.downloadermiddlewares.cookies import SharedCookiesMiddleware

    class CookieProbeSpider(Spider):
        name = "cookieprobe"

    async def go() -> tuple[int, bool]:
        crawler = get_crawler(CookieProbeSpider, {"REDIS_URL": redis_url, "COOKIES_SHARED": True})
        crawler.spider = CookieProbeSpider()
        mw = SharedCookiesMiddleware.from_crawler(crawler)
        requests = [Request(f"http://127.0.0.27/{n}") for n in range(5)]
        await asyncio.gather(*(mw.process_request(r) for r in requests))
        watchers = [t for t in asyncio.all_tasks() if "SharedCookiesMiddleware._watch" in repr(t)]
        await mw._stop_watching()
        return len(watchers), mw.watcher is not None and mw.watcher.done()

    assert asyncio.run(go()) == (1, True)


def test_a_listener_that_holds_on_to_its_cancellation_does_not_hang_the_close():
    import asyncio

    from scrapy_frontier.connection import stop_listener

    async def stubborn(release: asyncio.Event) -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    async def go() -> tuple[float, bool]:
        release = asyncio.Event()
        task = asyncio.get_running_loop().create_task(stubborn(release))
        await asyncio.sleep(0)
        started = time.monotonic()
        await stop_listener(task, timeout=0.2)
        took, done = time.monotonic() - started, task.done()
        release.set()
        await task
        return took, done

    took, done = asyncio.run(go())
    assert 0.2 <= took < 2 and not done
