"""Revisits (REVISIT_INTERVAL): two workers keep a loopback site fresh whose pages change on a
known schedule (tests/changing_server.py), with time compressed to seconds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from scrapy.settings import Settings

from scrapy_frontier.keys import Keys
from scrapy_frontier.revisit import (
    GROW,
    SHRINK,
    STATE_MARK,
    check_intervals,
    next_interval,
    read_schedule,
    schedule_args,
)
from tests.conftest import ROOT, scrapy_command
from tests.loopback import free_port, wait_port

#: Base interval and period of change of the crawls below (seconds).
BASE, PERIOD = 3.0, 6.0
REVISITS = {
    "REVISIT_INTERVAL": str(BASE),
    "REVISIT_MIN_INTERVAL": "1",
    "REVISIT_MAX_INTERVAL": "120",
    "AUTOTHROTTLE_ENABLED": "False",
    "ROBOTSTXT_OBEY": "False",
    "CONCURRENT_REQUESTS": "4",
}


#: A revisit request's JSON, its state replaced by the mark (as the scheduler writes it).
REVISIT_JSON = json.dumps({"url": "http://h/p", "meta": {"revisit": STATE_MARK}}, separators=(",", ":"))


class ChangingSite:
    def __init__(self, host: str, log: Path, pages: int, validators: bool) -> None:
        self.port = free_port(host)
        self.log = log
        self.url = f"http://{host}:{self.port}"
        env = {**os.environ, "PAGES": str(pages), "PERIOD": str(PERIOD), "VALIDATORS": "1" if validators else "0"}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "changing_server.py"), host, str(self.port), str(log)], env=env
        )
        wait_port(host, self.port)

    def requests(self) -> dict[str, list[tuple[float, int, int, bool]]]:
        """Per page path, its requests in order: (time, status, revision served, conditional)."""
        out: dict[str, list[tuple[float, int, int, bool]]] = defaultdict(list)
        for line in self.log.read_text().splitlines():
            t, path, status, rev, cond = line.split()
            out[path].append((float(t), int(status), int(rev), cond == "1"))
        return out

    def revision_now(self, n: int) -> int:
        # a query string of its own: the test's look is not counted as the crawl's
        body = urllib.request.urlopen(f"{self.url}/p/{n}?probe", timeout=10).read().decode()
        return int(re.search(r"Revision (\d+)\.", body).group(1))

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def changing_site(tmp_path):
    sites: list[ChangingSite] = []

    def start(host: str, pages: int = 24, validators: bool = True) -> ChangingSite:
        sites.append(ChangingSite(host, tmp_path / f"{host}.log", pages, validators))
        return sites[-1]

    yield start
    for s in sites:
        s.stop()


def test_the_interval_shrinks_on_a_change_and_grows_without_within_its_bounds():
    assert next_interval(10, True, 1, 100) == 10 * SHRINK
    assert next_interval(10, False, 1, 100) == 10 * GROW
    assert next_interval(1.1, True, 1, 100) == 1
    assert next_interval(90, False, 1, 100) == 100


@pytest.mark.parametrize(
    ("interval", "low", "high", "named"),
    [(0, 10, 5, "REVISIT_MIN_INTERVAL=10"), (3, 5, 10, "REVISIT_INTERVAL=3"), (20, 5, 10, "REVISIT_INTERVAL=20")],
)
def test_intervals_that_do_not_fit_together_are_named(interval, low, high, named):
    error = check_intervals(interval, low, high)
    assert error is not None and named in error
    assert check_intervals(0, 1, 5) is None and check_intervals(3, 1, 5) is None


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"REVISIT_INTERVAL": "30", "REVISIT_MIN_INTERVAL": "60"}, "REVISIT_INTERVAL=30"),
        ({"REVISIT_INTERVAL": "-1"}, "REVISIT_INTERVAL"),
        ({"REVISIT_MIN_INTERVAL": "100", "REVISIT_MAX_INTERVAL": "10"}, "REVISIT_MIN_INTERVAL=100"),
        ({"REVISIT_INTERVAL": "120", "DUPEFILTER_RECRAWL_AGE": "3600"}, "DUPEFILTER_RECRAWL_AGE"),
    ],
)
def test_a_bad_revisit_setting_stops_the_crawl_at_start_in_one_line(settings, named, start_worker, redis_url):
    worker = start_worker(settings=settings, env={"REDIS_URL": redis_url}, args=["-a", "url=http://127.0.0.9:1/"])
    assert worker.wait(60) == 1, worker.output[-3000:]
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and named in errors[0], worker.output[-3000:]
    assert "Traceback" not in worker.output


def crawl_for(seconds: float, site: ChangingSite, start_workers, redis_url, redis_client, mysql_url) -> dict:
    """Two workers revisiting ``site`` for ``seconds`` after its first page, then stopped
    (SIGTERM). Returns each changing page's revision when they were stopped."""
    workers = start_workers(2, settings=REVISITS, env={"REDIS_URL": redis_url, "MYSQL_URL": mysql_url})
    redis_client.lpush("site:start_urls", f"{site.url}/")
    time.sleep(seconds)
    status = json.loads(scrapy_command(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
    for w in workers:
        w.signal(signal.SIGTERM)
    stopped = time.time()
    now = {n: site.revision_now(n) for n in range(0, 24, 4)}
    for w in workers:
        assert w.wait(60) == 0, w.output[-3000:]
    return {"workers": workers, "revisions": now, "stopped": stopped, "status": status["revisits"]}


@pytest.mark.core
@pytest.mark.slow
def test_two_workers_keep_a_changing_site_fresh_with_conditional_gets(
    changing_site, start_workers, redis_url, redis_client, mysql_url, mysql_query
):
    """Every 4th page changes every PERIOD seconds, the others never; ETag, Last-Modified and
    304 on a match. After a minute: the changing pages are stored at most one version behind,
    the unchanged ones were fetched at most half as often as BASE alone would, revisits are
    conditional and the unchanged ones answered 304, one row per URL."""
    site = changing_site("127.0.0.31")
    seconds = 60.0
    ran = crawl_for(seconds, site, start_workers, redis_url, redis_client, mysql_url)
    rows = mysql_query("SELECT url, text, changes FROM pages")
    stored = {url.rsplit("/p/", 1)[1]: (text, changes) for url, text, changes in rows if "/p/" in url}
    behind = {}
    for n, now in ran["revisions"].items():
        text, _ = stored[str(n)]
        behind[n] = now - int(re.search(r"Revision (\d+)\.", text).group(1))
    requests = site.requests()
    revisits = [r for path, rs in requests.items() if path.startswith("/p/") for r in rs[1:]]
    conditional = sum(1 for r in revisits if r[3]) / len(revisits)
    unchanged = [r for rs in requests.values() for prev, r in zip(rs, rs[1:]) if r[2] == prev[2]]
    not_modified = sum(1 for r in unchanged if r[1] == 304) / len(unchanged)
    steady = [n for n in range(24) if n % 4]
    fetches = {n: len(requests[f"/p/{n}"]) for n in steady}
    base_fetches = (ran["stopped"] - min(rs[0][0] for rs in requests.values())) / BASE
    figures = {
        "versions_behind": behind,
        "revisits": len(revisits),
        "conditional_share": round(conditional, 3),
        "unchanged_revisits_304_share": round(not_modified, 3),
        "unchanged_page_fetches": fetches,
        "base_interval_fetches": round(base_fetches, 1),
        "changes_stored": {n: stored[str(n)][1] for n in ran["revisions"]},
        "stats": {k: sum(w.stat(f"revisit/{k}") for w in ran["workers"]) for k in ("scheduled", "not_modified", "due")},
        "status": ran["status"],
    }
    print("FIGURES", json.dumps(figures))
    assert sum(1 for b in behind.values() if b <= 1) >= 0.9 * len(behind), figures
    assert max(fetches.values()) <= 0.5 * base_fetches, figures
    assert conditional >= 0.9 and not_modified >= 0.9, figures
    # a 304 is no error: Scrapy's HttpErrorMiddleware logs no "Ignoring response" line for it
    assert not any("Ignoring response <304" in w.output for w in ran["workers"])
    assert len(rows) == len({url for url, _, _ in rows}) == 25, figures
    assert all(stored[str(n)][1] >= 1 for n in ran["revisions"]), figures
    assert all(stored[str(n)][1] == 0 for n in steady), figures
    # scrapy status: most pages wait in the schedule, none long overdue, most revisits answered 304
    assert ran["status"]["scheduled"] >= 15 and ran["status"]["overdue_s"] < 5, figures
    assert 0.5 <= ran["status"]["not_modified_share"] <= 1, figures


@pytest.mark.slow
def test_without_validators_changes_are_found_in_the_content(
    changing_site, start_workers, redis_url, redis_client, mysql_url, mysql_query
):
    """The same site without ETag or Last-Modified: every revisit is a 200 whose bytes differ
    (the aside), yet only the pages whose main text changed count changes, and the others back
    off as with validators."""
    site = changing_site("127.0.0.32", validators=False)
    seconds = 40.0
    ran = crawl_for(seconds, site, start_workers, redis_url, redis_client, mysql_url)
    changes = {url.rsplit("/p/", 1)[1]: c for url, c in mysql_query("SELECT url, changes FROM pages") if "/p/" in url}
    requests = site.requests()
    steady = [n for n in range(24) if n % 4]
    fetches = {n: len(requests[f"/p/{n}"]) for n in steady}
    base_fetches = (ran["stopped"] - min(rs[0][0] for rs in requests.values())) / BASE
    figures = {
        "changes": changes,
        "unchanged_page_fetches": fetches,
        "base_interval_fetches": round(base_fetches, 1),
        "statuses": sorted({r[1] for rs in requests.values() for r in rs}),
    }
    print("FIGURES", json.dumps(figures))
    assert figures["statuses"] == [200], figures
    assert all(changes[str(n)] >= 1 for n in ran["revisions"]), figures
    assert all(changes[str(n)] == 0 for n in steady), figures
    assert max(fetches.values()) <= 0.5 * base_fetches, figures


def schedule_size(redis_client) -> int:
    """The pages the crawl's revisit schedule counts, every shard."""
    keys = Keys.for_spider(Settings(), "site")
    return sum(int(redis_client.hget(sh.revisit_meta, "n") or 0) for sh in keys.all_shards())


def scheduled_pages(redis_client) -> set[str]:
    """The page paths the crawl holds: in the revisit schedule, queued (every host's lists) or
    leased (a killed worker's leases, until they are reclaimed)."""
    held = b" ".join(
        f':0{urlsplit(url).path}"'.encode()
        for url, _, _ in read_schedule(redis_client, Keys.for_spider(Settings(), "site"))
    )
    for key in redis_client.scan_iter(match="site:requests:*#*"):
        held += b" " + b" ".join(redis_client.lrange(key, 0, -1))
    for key in redis_client.scan_iter(match="site:*leases*"):
        held += b" " + b" ".join(redis_client.hvals(key))
    return {m.decode() for m in re.findall(rb':\d+(/p/\d+|/)"', held)}


@pytest.mark.slow
def test_a_worker_killed_every_four_seconds_loses_no_scheduled_page(
    changing_site, start_worker, redis_url, redis_client, mysql_url
):
    """Two workers, one SIGKILLed 4 s after it joined and started again, 9 times (about 40 s):
    every page is revisited and, once the workers are stopped, every page is still scheduled (or
    queued)."""
    site = changing_site("127.0.0.33")
    settings = {**REVISITS, "FRONTIER_HEARTBEAT_INTERVAL": "1", "FRONTIER_NODE_TIMEOUT": "3"}
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    workers = [start_worker(settings=settings, env=env) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{site.url}/")
    kills = 9  # a count, not a duration: a loaded machine starts a worker more slowly
    victim = workers[1]
    for _ in range(kills):
        time.sleep(4)
        victim.proc.kill()
        victim.proc.wait()
        victim = start_worker(settings=settings, env=env)
        workers.append(victim)
        victim.wait_for("Joined the crawl")
    time.sleep(2)  # the last one started takes leases before it is stopped
    for w in (workers[0], victim):
        w.signal(signal.SIGTERM)
    for w in (workers[0], victim):
        assert w.wait(60) == 0, w.output[-3000:]
    fetches = {path: len(rs) for path, rs in site.requests().items()}
    held = scheduled_pages(redis_client)
    figures = {"kills": kills, "fetches": fetches, "pages_held": len(held)}
    print("FIGURES", json.dumps(figures))
    assert held == {"/"} | {f"/p/{n}" for n in range(24)}, figures
    assert all(fetches.get(f"/p/{n}", 0) >= 3 for n in range(24)), figures


@pytest.mark.slow
def test_a_worker_whose_clock_is_two_minutes_ahead_revisits_nothing_early(
    changing_site, start_worker, redis_url, redis_client, mysql_url
):
    """Due times are Redis's: a worker 120 s ahead (libfaketime, its monotonic clock left alone)
    fetches no page again before its interval (here at least 4 s)."""
    from tests.test_clock import LIBFAKETIME, skewed

    if not LIBFAKETIME.exists():
        pytest.skip("needs Debian's faketime (tests/run.sh installs it)")
    site = changing_site("127.0.0.34")
    settings = {**REVISITS, "REVISIT_INTERVAL": "4", "REVISIT_MIN_INTERVAL": "4"}
    worker = start_worker(settings=settings, env={"REDIS_URL": redis_url, "MYSQL_URL": mysql_url, **skewed("+120s")})
    worker.wait_for("Joined the crawl", timeout=120)
    redis_client.lpush("site:start_urls", f"{site.url}/")
    time.sleep(25)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output[-3000:]
    gaps = [b[0] - a[0] for rs in site.requests().values() for a, b in zip(rs, rs[1:])]
    print("FIGURES", json.dumps({"revisits": len(gaps), "shortest_gap_s": round(min(gaps), 2)}))
    assert len(gaps) >= 24, gaps
    assert min(gaps) >= 3.9, sorted(gaps)[:5]


@pytest.mark.slow
def test_push_now_fetches_a_scheduled_page_at_once_and_forget_takes_one_out(
    changing_site, start_worker, redis_url, redis_client, mysql_url
):
    """``scrapy push --now`` fetches a scheduled page at once (a first fetch: no validators) and
    its record due later is dropped; ``scrapy forget`` takes a page out of the schedule (it is
    fetched again only as a new link); a page the site no longer has (410) leaves it at its
    revisit."""
    site = changing_site("127.0.0.35")
    settings = {**REVISITS, "REVISIT_INTERVAL": "12"}
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    worker = start_worker(settings=settings, env=env)
    worker.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{site.url}/")
    deadline = time.monotonic() + 60
    while len(scheduled_pages(redis_client)) < 25 or schedule_size(redis_client) < 25:
        assert time.monotonic() < deadline, scheduled_pages(redis_client)
        time.sleep(0.2)
    Path(f"{site.log}.gone").write_text("3\n")
    pushed = scrapy_command(["push", "site", f"{site.url}/p/1", "--now"], {"REDIS_URL": redis_url})
    assert pushed.returncode == 0 and "1 to fetch now, even if seen" in pushed.stdout, pushed.stdout + pushed.stderr
    forgot = scrapy_command(["forget", "site", f"{site.url}/p/2"], {"REDIS_URL": redis_url})
    assert forgot.returncode == 0, forgot.stdout + forgot.stderr
    deadline = time.monotonic() + 40
    while len(site.requests()["/p/1"]) < 2 or len(site.requests()["/p/3"]) < 2:
        assert time.monotonic() < deadline, site.requests()
        time.sleep(0.5)
    held = scheduled_pages(redis_client)
    time.sleep(3)  # past the due time of every page of the first round
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output[-3000:]
    fetches = site.requests()
    print("FIGURES", json.dumps({"p1": fetches["/p/1"], "p2": fetches["/p/2"], "held": sorted(held)}))
    again = fetches["/p/1"][1]
    assert again[1] == 200 and not again[3] and again[0] - fetches["/p/1"][0][0] < 10, fetches["/p/1"]
    # its first round's record was dropped: the next fetch is the pushed fetch's revisit
    assert all(t - again[0] > 11 for t, *_ in fetches["/p/1"][2:]), fetches["/p/1"]
    assert "/p/1" in held, held
    # forgotten: its record was dropped (no revisit, no conditional GET); the dupefilter let it
    # through once more, so a page that links to it may fetch it anew
    assert not any(cond for *_, cond in fetches["/p/2"]) and len(fetches["/p/2"]) <= 2, fetches["/p/2"]
    # a page gone from the site (410) leaves the schedule: it costs no more requests
    assert fetches["/p/3"][1][1] == 410 and len(fetches["/p/3"]) == 2, fetches["/p/3"]
    assert "/p/3" not in scheduled_pages(redis_client)
    assert worker.stat("revisit/dropped/410") == 1


@pytest.mark.slow
def test_revisits_on_a_sharded_frontier(changing_site, start_worker, redis_url, redis_client, mysql_url):
    """FRONTIER_SHARDS=4 (the layout of a Redis Cluster, on one Redis): two sites' pages are
    scheduled in their hosts' shards, revisited, and counted by ``scrapy status``."""
    sites = [changing_site("127.0.0.36", pages=8), changing_site("127.0.0.37", pages=8)]
    settings = {**REVISITS, "FRONTIER_SHARDS": "4"}
    worker = start_worker(settings=settings, env={"REDIS_URL": redis_url, "MYSQL_URL": mysql_url})
    worker.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", *(f"{s.url}/" for s in sites))
    time.sleep(20)
    status = json.loads(scrapy_command(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)["revisits"]
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output[-3000:]
    fetches = [len(s.requests()[f"/p/{n}"]) for s in sites for n in range(8)]
    schedules = [k for k in redis_client.scan_iter(match="site:*@revisit:wheel") if redis_client.zcard(k)]
    print("FIGURES", json.dumps({"fetches": fetches, "status": status, "shards_used": len(schedules)}))
    assert min(fetches) >= 3, fetches
    assert len(schedules) >= 1 and all(b"{" in k for k in schedules), schedules
    assert 14 <= status["scheduled"] + status["due"] <= 18, status


def test_a_forgotten_page_is_not_scheduled_again_by_a_revisit_already_under_way(redis_url):
    """``scrapy forget``: the page's record is dropped when due, and a revisit of it then
    queued or in flight does not put it back; a first fetch of it (pushed again) does, and so
    does that fetch's own revisit."""
    import asyncio

    import redis as sync_redis
    import redis.asyncio

    from scrapy_frontier.frontier import Frontier
    from scrapy_frontier.revisit import supersede

    keys = Keys.for_spider(Settings(), "site")
    sync = sync_redis.Redis.from_url(redis_url)
    fp = "ab" * 20

    def page(since: int) -> tuple[str, list]:
        state = {"interval": 0.2, "first_seen": 1, "hash": "00" * 8}
        return "h", schedule_args(REVISIT_JSON, "h", "0", fp, 0.2, since, state)

    async def go() -> list:
        client = redis.asyncio.Redis.from_url(redis_url)
        frontier = Frontier(client, keys, "n1")
        out = []
        try:
            await frontier.schedule([page(0)])
            before = int(time.time() * 1000)
            time.sleep(0.01)
            supersede(sync, keys, {0: [fp]})
            await frontier.schedule([page(before)])  # the revisit that was under way
            out.append(schedule_size(sync))
            await frontier.schedule([page(0)])  # fetched anew
            out.append(len(list(read_schedule(sync, keys))))
            await asyncio.sleep(0.3)
            out.append((await frontier.queue_due(10, 0.1))[0])
            await frontier.schedule([page(int(time.time() * 1000))])  # and revisited
            out.append(len(list(read_schedule(sync, keys))))
        finally:
            await client.aclose()
        return out

    assert asyncio.run(go()) == [1, 1, 1, 1]
