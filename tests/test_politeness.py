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
    def __init__(self, host: str, log: Path, pages: int, robots: str | None = None, delay_ms: int = 0) -> None:
        self.port = free_port(host)
        self.log = log
        self.url = f"http://{host}:{self.port}"
        env = {**os.environ, "SITE_PAGES": str(pages)}
        if robots:
            env["ROBOTS_TXT"] = robots
        if delay_ms:
            env["SITE_DELAY_MS"] = str(delay_ms)
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

    def start(host: str, pages: int = 60, robots: str | None = None, delay_ms: int = 0) -> RecordingServer:
        servers.append(RecordingServer(host, tmp_path / f"{host}.log", pages, robots, delay_ms))
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


@pytest.mark.slow
def test_three_workers_share_one_rate_limit(recording_server, start_workers, redis_url, redis_client):
    server = recording_server("127.0.0.11", pages=60)
    settings = {**FAST, "DOMAIN_RATE_LIMIT": "5"}
    workers = start_workers(3, settings=settings, env={"REDIS_URL": redis_url})
    redis_client.lpush("site:start_urls", f"{server.url}/site/0")
    for w in workers:
        assert w.wait(120) == 0, w.output[-3000:]
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
    workers = start_workers(2, settings=settings, env={"REDIS_URL": redis_url})
    redis_client.lpush("site:start_urls", f"{server.url}/site/0")
    for w in workers:
        assert w.wait(120) == 0, w.output[-3000:]
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
    workers = start_workers(2, settings=settings, env={"REDIS_URL": redis_url})
    redis_client.lpush("site:start_urls", f"{server.url}/site/0")
    for w in workers:
        assert w.wait(120) == 0, w.output[-3000:]
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
