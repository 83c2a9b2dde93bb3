"""Retries: backoff between attempts, Retry-After obeyed, final failures kept as dead letters."""

from __future__ import annotations

import json
import subprocess
import sys
from email.utils import formatdate
from pathlib import Path

import pytest

from scrapy_frontier.downloadermiddlewares.retry import backoff_delay, parse_retry_after
from tests.loopback import free_port, wait_port

HERE = Path(__file__).resolve().parent


def test_parse_retry_after_seconds_and_http_date():
    assert parse_retry_after(b"120") == 120.0
    now = 1_800_000_000.0
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30.0)
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert parse_retry_after(b"soon") is None
    assert parse_retry_after(None) is None


def test_backoff_grows_and_is_capped():
    import random

    rng = random.Random(1)
    delays = [backoff_delay(n, base=1.0, cap=10.0, rng=rng) for n in (1, 2, 3, 4, 5, 6)]
    assert 0.5 <= delays[0] <= 1.0 and 4.0 <= delays[3] <= 8.0
    assert all(5.0 <= d <= 10.0 for d in delays[4:])


@pytest.fixture
def flaky(tmp_path):
    host, port, log = "127.0.0.6", free_port("127.0.0.6"), tmp_path / "requests.log"
    proc = subprocess.Popen([sys.executable, str(HERE / "flaky_server.py"), host, str(port), str(log)])
    wait_port(host, port)
    yield f"http://{host}:{port}", log
    proc.terminate()
    proc.wait(10)


def hits(log: Path, prefix: str) -> list[float]:
    return [
        float(t) for t, path in (line.split(" ", 1) for line in log.read_text().splitlines()) if path.startswith(prefix)
    ]


def test_retries_back_off_honour_retry_after_and_end_in_dead_letters(flaky, start_worker, redis_url, redis_client):
    base, log = flaky
    worker = start_worker(
        "probe",
        settings={
            "SPIDER_MODULES": "tests.spiders",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
            "RETRY_BACKOFF_BASE": "0.4",
            "RETRY_TIMES": "2",
        },
        env={"REDIS_URL": redis_url},
    )
    worker.wait_for("Joined the crawl")
    redis_client.lpush("probe:start_urls", f"{base}/always500/a", f"{base}/retry-after/2/b")
    assert worker.wait() == 0, worker.output[-3000:]

    broken = hits(log, "/always500/a")
    assert len(broken) == 3  # RETRY_TIMES=2: three attempts
    assert all(b - a >= 0.2 for a, b in zip(broken, broken[1:]))  # backoff (0.5 x base at least)
    slow = hits(log, "/retry-after/2/b")
    assert len(slow) == 2 and slow[1] - slow[0] >= 1.9
    assert worker.stat("retry/retry_after") == 1

    failed = [json.loads(r) for r in redis_client.lrange("probe:requests:failed", 0, -1)]
    assert len(failed) == 1
    record = failed[0]
    assert (record["reason"], record["status"], record["attempts"], record["url"]) == (
        "retries_exhausted",
        500,
        3,
        f"{base}/always500/a",
    )
    assert record["request"]["url"] == f"{base}/always500/a"
    assert worker.stat("frontier/failed/retries_exhausted") == 1
    assert not list(redis_client.scan_iter(match="probe:leases:*"))


def stored_pages(db: Path) -> list[tuple[str, str]]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return sorted(conn.execute("SELECT url, final_url FROM pages").fetchall())


def redirect_worker(start_worker, redis_url, tmp_path):
    return start_worker(
        settings={
            "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
            "RETRY_BACKOFF_BASE": "0.2",
            "LOG_LEVEL": "DEBUG",
            "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
        },
        env={"REDIS_URL": redis_url},
    )


def test_a_retried_redirect_onto_a_crawled_page_is_not_fetched_again(
    flaky, start_worker, redis_url, redis_client, tmp_path
):
    """``/sbn/`` redirects to ``/bn``, which fails once (503) and, retried, redirects to
    ``/sbn``, crawled already: the retry's ``dont_filter`` is not carried onto its redirect, so
    ``/sbn`` is fetched once and stored once, and the dropped redirect is logged."""
    base, log = flaky
    worker = redirect_worker(start_worker, redis_url, tmp_path)
    worker.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{base}/sbn", f"{base}/sbn/")
    assert worker.wait() == 0, worker.output[-3000:]
    paths = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    assert paths.count("/sbn") == 1 and paths.count("/bn") == 2 and paths.count("/sbn/") == 1, paths
    assert stored_pages(tmp_path / "pages.sqlite3") == [(f"{base}/sbn", f"{base}/sbn")]
    assert f"Filtered duplicate request: <GET {base}/sbn>" in worker.output
    assert worker.stat("dupefilter/filtered") == 1
    assert not list(redis_client.scan_iter(match="site:leases:*"))


def test_a_page_redirecting_to_itself_is_followed_once(flaky, start_worker, redis_url, redis_client, tmp_path):
    """``/profile`` sets a cookie and redirects to itself: followed once, then 200 and stored.
    ``/loop`` redirects to itself forever: followed once, then dropped as a duplicate."""
    base, log = flaky
    worker = redirect_worker(start_worker, redis_url, tmp_path)
    worker.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{base}/profile", f"{base}/loop")
    assert worker.wait() == 0, worker.output[-3000:]
    paths = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    assert paths.count("/profile") == 2 and paths.count("/loop") == 2, paths
    assert stored_pages(tmp_path / "pages.sqlite3") == [(f"{base}/profile", f"{base}/profile")]
    assert f"Filtered duplicate request: <GET {base}/loop>" in worker.output


def test_default_ports_collapse(tmp_path, start_worker, redis_url, redis_client):
    """``http://host/pp`` and ``http://host:80/pp`` are one page: fetched once, stored once under
    the URL without the port, one robots.txt (RFC 3986 section 6.2.3)."""
    host, log = "127.0.0.37", tmp_path / "port80.log"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "flaky_server.py"), host, "80", str(log)], stderr=subprocess.PIPE
    )
    try:
        try:
            wait_port(host, 80, timeout=5)
        except RuntimeError:
            pytest.skip(
                f"cannot serve on {host}:80 (not root, or the port is taken): "
                f"{proc.stderr.read1().decode()[-300:] if proc.poll() is not None else ''}"
            )
        worker = redirect_worker(start_worker, redis_url, tmp_path)
        worker.wait_for("Joined the crawl")
        redis_client.lpush("site:start_urls", f"http://{host}:80/ports")
        assert worker.wait() == 0, worker.output[-3000:]
    finally:
        proc.terminate()
        proc.wait(10)
    paths = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    assert sorted(paths) == ["/ports", "/pp", "/robots.txt"], paths
    assert stored_pages(tmp_path / "pages.sqlite3") == [
        (f"http://{host}/ports", f"http://{host}/ports"),
        (f"http://{host}/pp", f"http://{host}/pp"),
    ]


def test_a_page_over_the_size_limit_is_a_dead_letter_and_memory_stays_bounded(
    flaky, start_worker, redis_url, redis_client, tmp_path
):
    """The project's DOWNLOAD_MAXSIZE (8 MiB) stops a 50 MB page early, whether or not it says its
    size: kept as a dead letter with the reason, the worker's peak memory far below the page."""
    base, log = flaky
    worker = start_worker(
        settings={
            "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
            "RETRY_BACKOFF_BASE": "0.2",
            "SQLITE_PATH": str(tmp_path / "pages.sqlite3"),
            "MEMUSAGE_CHECK_INTERVAL_SECONDS": "1",
        },
        env={"REDIS_URL": redis_url},
    )
    worker.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{base}/huge/50", f"{base}/huge-unsized/50", f"{base}/ok")
    assert worker.wait() == 0, worker.output[-3000:]
    failed = sorted((json.loads(r) for r in redis_client.lrange("site:requests:failed", 0, -1)), key=lambda r: r["url"])
    assert [r["url"] for r in failed] == [f"{base}/huge-unsized/50", f"{base}/huge/50"], failed
    for record in failed:
        assert record["reason"] == "too_large" and "download max size (8388608" in record["exception"], record
    assert stored_pages(tmp_path / "pages.sqlite3") == [(f"{base}/ok", f"{base}/ok")]
    peak = worker.stat("memusage/max")
    print(f"FIGURES worker peak RSS with two 50 MB pages refused: {peak / 2**20:.0f} MiB")
    assert peak < 250 * 2**20


def test_redirects_dropped_offsite_end_their_leases_and_the_crawl_finishes(
    flaky, start_workers, redis_url, redis_client, tmp_path
):
    """``/offsite`` links to 20 pages that redirect (301) to another host: Scrapy's offsite
    filter drops the redirects before the scheduler (``request_scheduled``). Each one's parent
    lease is acknowledged all the same: both workers find the crawl idle and exit by themselves,
    and no lease is left in Redis."""
    base, log = flaky
    settings = {"SPIDER_MODULES": "tests.spiders", "MAX_IDLE_TIME_BEFORE_CLOSE": "3", "SCHEDULER_PERSIST": "True"}
    workers = start_workers(
        2, "offsite", settings=settings, env={"REDIS_URL": redis_url}, args=["-a", f"url={base}/offsite"]
    )
    for w in workers:
        assert w.wait(120) == 0, w.output[-3000:]
    paths = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    assert sorted(p for p in paths if p.startswith("/away/")) == sorted(f"/away/{n}" for n in range(20))
    assert sum(w.stat("offsite/filtered") for w in workers) == 20
    assert sum(w.stat("frontier/dropped/before_scheduler") for w in workers) == 20
    assert any("Dropped before the scheduler (offsite" in w.output for w in workers)
    assert not list(redis_client.scan_iter(match="offsite:leases:*"))
    # no host has a request in flight (the hash keeps only its mark, '@')
    assert set(redis_client.hkeys("offsite:politeness:@inflight")) <= {b"@"}
