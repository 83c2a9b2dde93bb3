"""Retries: backoff between attempts, Retry-After obeyed, final failures kept as dead letters."""

from __future__ import annotations

import json
import subprocess
import sys
from email.utils import formatdate
from pathlib import Path

import pytest

from scrapy_frontier.downloadermiddlewares.retry import backoff_delay, parse_retry_after
from tests.conftest import free_port, wait_port

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
    return [float(t) for t, path in (line.split(" ", 1) for line in log.read_text().splitlines()) if path.startswith(prefix)]


def test_retries_back_off_honour_retry_after_and_end_in_dead_letters(flaky, start_worker, redis_url, redis_client):
    base, log = flaky
    worker = start_worker(
        "probe",
        settings={"SPIDER_MODULES": "tests.spiders", "MAX_IDLE_TIME_BEFORE_CLOSE": "3", "RETRY_BACKOFF_BASE": "0.4", "RETRY_TIMES": "2"},
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
    assert (record["reason"], record["status"], record["attempts"], record["url"]) == ("retries_exhausted", 500, 3, f"{base}/always500/a")
    assert record["request"]["url"] == f"{base}/always500/a"
    assert worker.stat("frontier/failed/retries_exhausted") == 1
    assert not list(redis_client.scan_iter(match="probe:leases:*"))
