"""``scrapy requeue`` and ``scrapy replay`` against the real Redis, with bad records."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

GOOD_PAGE = {"url": "http://h/2", "status": 200, "content_hash": "a" * 64, "fetched_at": "2026-01-01T00:00:00+00:00", "title": "ok"}


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrapy", *command], cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env}, capture_output=True, text=True, timeout=120
    )


def test_requeue_moves_requests_and_keeps_what_is_not_a_request(redis_url, redis_client):
    bad = [
        b'{"request": {"url": "http://h/a", "meta": "notadict"}}',
        b'{"request": {"url": 5}}',
        b'{"request": {"url": "http://h/b", "priority": "high"}}',
        b'{"request": {"url": "ftp://h/c"}}',
        b"not json",
    ]
    good = json.dumps({"reason": "retries_exhausted", "request": {"url": "http://h/ok", "meta": {"retry_times": 2, "depth": 3}, "priority": 4}})
    redis_client.lpush("site:requests:failed", *bad, good)
    done = run(["requeue", "site", "--json"], {"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"requeued": 1, "unreadable": 5, "left": 5}
    assert redis_client.zrange("site:requests:h", 0, -1, withscores=True) == [(b"-4", -4)]  # its priority
    queued = redis_client.lrange("site:requests:h#-4", 0, -1)
    assert len(queued) == 1
    assert json.loads(queued[0])["meta"] == {"depth": 3}  # fresh retries
    assert redis_client.zscore("site:requests", "h") is not None
    assert run(["requeue", "site", "--limit", "-1"], {"REDIS_URL": redis_url}).returncode != 0


def test_replay_refuses_unknown_classes_and_broken_records_without_running_them(redis_url, redis_client, tmp_path):
    marker = tmp_path / "pwned"
    records = [
        json.dumps({"item_class": "os.system", "item": {"command": f"touch {marker}"}}),
        "[" * 100_000 + "]" * 100_000,
        json.dumps({"item_class": "crawler.items.Page", "item": {**GOOD_PAGE, "url": "http://h/1", "title": "\ud800"}}),
        json.dumps({"item_class": "crawler.items.Page", "item": {**GOOD_PAGE, "depth": "deep"}}),
        json.dumps({"item_class": "crawler.items.Page", "item": GOOD_PAGE}),
    ]
    redis_client.lpush("site:items:pending", *records)
    db = tmp_path / "r.sqlite3"
    done = run(["replay", "site", "--json", "-s", f"SQLITE_PATH={db}"], {"REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"written": 1, "refused": 4, "left": 0}
    assert not marker.exists()
    assert [r[0] for r in sqlite3.connect(db).execute("SELECT url FROM pages")] == ["http://h/2"]
    invalid = [json.loads(r) for r in redis_client.lrange("site:items:invalid", 0, -1)]
    assert len(invalid) == 4 and {r["reason"] for r in invalid} == {"unreplayable"}
    assert not list(redis_client.scan_iter(match="site:items:pending:*"))


def test_replay_setup_errors_are_one_line(redis_url):
    done = run(["replay", "site"], {"REDIS_URL": redis_url, "MYSQL_URL": "postgres://u:s3cretpw@h/db"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: MYSQL_URL postgres://u:***@h/db must start with mysql://"]
    assert done.stdout == ""
    done = run(["requeue", "site"], {"REDIS_URL": "redis://127.0.0.1:1/0?password=s3cretpw"})
    assert done.returncode == 2 and "s3cretpw" not in done.stderr and "Traceback" not in done.stderr


def test_push_checks_payloads_like_a_worker(redis_url, redis_client):
    done = run(["push", "site", "http://a.example/", "not a url", '{"url": "ftp://x"}', '{"url": "http://b.example/", "meta": {"depth": "x"}}', "--json"], {"REDIS_URL": redis_url})
    assert done.returncode == 1  # some refused
    result = json.loads(done.stdout)
    assert result["pushed"] == 1
    assert [r["reason"] for r in result["refused"]] == ["bad_url", "bad_scheme", "bad_field"]
    assert redis_client.lrange("site:start_urls", 0, -1) == [b"http://a.example/"]
    assert run(["push", "nosuch", "http://x/"], {"REDIS_URL": redis_url}).returncode == 2


@pytest.mark.slow
def test_status_during_and_after_a_two_worker_crawl(docs_site, start_workers, redis_url, redis_client, mysql_url, mysql_query):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": "2", "SCHEDULER_PERSIST": "True", "CONCURRENT_REQUESTS": "4", "DOWNLOAD_DELAY": "0.02"}
    workers = start_workers(2, settings=settings, env=env)
    redis_client.lpush("site:start_urls", f"{docs_site.url}index.html")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        during = json.loads(run(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
        if during["pages"] >= 20:
            break
        time.sleep(1)
    assert len(during["workers"]) == 2 and not during["idle"]
    assert during["frontier"]["queued"] + during["frontier"]["in_flight"] > 0
    for w in workers:
        assert w.wait() == 0
    after = json.loads(run(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
    assert after["idle"] and after["workers"] == [] and after["frontier"]["in_flight"] == 0
    assert after["dupefilter_size"] == int(redis_client.get("site:dupefilter:count")) >= mysql_query("SELECT COUNT(*) FROM pages")[0][0] == 526
    text = run(["status", "site"], {"REDIS_URL": redis_url}).stdout
    assert text.startswith("crawl 'site': idle")
    listing = json.loads(run(["status", "--json"], {"REDIS_URL": redis_url}).stdout)["crawls"]
    site = [c for c in listing if c["crawl"] == "site"]
    assert site == [{"crawl": "site", "spider": "site", "crawl_id": None, "idle": True, "hosts": 0, "start_urls_waiting": 0, "in_flight": 0, "workers": 0, "seen": after["dupefilter_size"], "requests_failed": 0}]
    assert "site: idle, 0 workers" in run(["status"], {"REDIS_URL": redis_url}).stdout
