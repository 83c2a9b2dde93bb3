"""End-to-end crawls of the python3.11-doc site with real ``scrapy crawl`` processes."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pymysql
import pytest

from tests.conftest import ROOT

DISTRIBUTED = {"MAX_IDLE_TIME_BEFORE_CLOSE": "3"}


def stored_urls_mysql(mysql_query) -> list[str]:
    try:
        return [row[0] for row in mysql_query("SELECT url FROM pages")]
    except pymysql.err.ProgrammingError:  # the workers have not created the table yet
        return []


@pytest.mark.slow
def test_embedded_crawl_stores_every_reachable_page(docs_site, expected_pages, start_worker, tmp_path):
    db = tmp_path / "crawl.sqlite3"
    worker = start_worker(settings={"SQLITE_PATH": str(db)}, args=["-a", f"url={docs_site.url}index.html"])
    assert worker.wait() == 0, worker.output[-3000:]
    urls = [row[0] for row in sqlite3.connect(db).execute("SELECT url FROM pages")]
    assert len(urls) == len(set(urls))
    assert set(urls) == expected_pages
    assert "Storing items in SQLite" in worker.output
    assert "Warning" not in worker.output and "Traceback" not in worker.output


def two_workers_share_the_docs(start_worker, env: dict[str, str], push, expected_pages, mysql_query) -> list:
    """Two workers on ``env``'s Redis crawl the docs from ``push(start_url)``: every page stored
    once, both take part, no traceback or warning. Returns the workers."""
    workers = [start_worker(settings=DISTRIBUTED, env=env) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    push("index.html")
    for w in workers:
        assert w.wait() == 0, w.output[-3000:]
    urls = stored_urls_mysql(mysql_query)
    assert len(urls) == len(set(urls)), "a page was stored twice"
    assert set(urls) == expected_pages
    shares = [w.stat("item_scraped_count") for w in workers]
    assert all(shares) and sum(shares) == len(expected_pages), shares
    for w in workers:
        assert "Warning" not in w.output and "Traceback" not in w.output and " ERROR: " not in w.output
    return workers


@pytest.mark.core
@pytest.mark.slow
def test_two_workers_share_one_crawl(
    docs_site, expected_pages, start_worker, redis_url, redis_client, mysql_url, mysql_query
):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    two_workers_share_the_docs(
        start_worker,
        env,
        lambda path: redis_client.lpush("site:start_urls", docs_site.url + path),
        expected_pages,
        mysql_query,
    )
    # nothing is left in flight, and the last worker cleared the crawl (SCHEDULER_PERSIST=False)
    assert not list(redis_client.scan_iter(match="site:leases:*"))
    assert not redis_client.exists("site:dupefilter", "site:requests")


@pytest.mark.slow
def test_same_crawl_in_redis_cache(docs_site, start_worker, redis_url, redis_client, tmp_path):
    """Distributed mode without MYSQL_URL stores in SQLite and caches every page in Redis."""
    db = tmp_path / "crawl.sqlite3"
    worker = start_worker(
        settings={**DISTRIBUTED, "SQLITE_PATH": str(db), "SCHEDULER_PERSIST": "True", "REDIS_CACHE_ITEMS": "True"},
        env={"REDIS_URL": redis_url},
    )
    worker.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{docs_site.url}library/json.html")
    assert worker.wait() == 0
    stored = sqlite3.connect(db).execute("SELECT COUNT(*) FROM pages").fetchone()[0]
    cached = len(list(redis_client.scan_iter(match="site:items:cache:*")))
    assert stored > 10 and cached == stored
    assert int(redis_client.get("site:dupefilter:count")) >= stored  # persisted (the packed layout counts)


def test_start_url_payloads(docs_site, start_worker, redis_url, redis_client, tmp_path):
    out = tmp_path / "items.jl"
    worker = start_worker(
        "probe",
        settings={
            **DISTRIBUTED,
            "SPIDER_MODULES": "tests.spiders",
            "FEEDS": json.dumps({str(out): {"format": "jsonlines"}}),
        },
        env={"REDIS_URL": redis_url},
    )
    worker.wait_for("Joined the crawl")
    base = docs_site.url
    bad = [
        b"not a url",
        b'{"url": "ftp://x"}',
        b'{"url": "file:///etc/passwd"}',
        b'{"url": "http://127.0.0.60:99999/"}',  # a port out of range: refused, kept, the batch goes on
        b"[1,2]",
        b"123",
        b"\xff\xfe\x00\x80",
        b"http://" + b"a" * 10_000_000,
        b'{"url": "http://user:s3cret-pw@127.0.0.60/"}',  # a password: refused, never logged
    ]
    good = [
        f"{base}library/json.html".encode(),
        f"{base}library/json.html".encode(),  # twice: crawled once
        json.dumps({"url": f"{base}library/os.html", "meta": {"probe": "hello"}, "formdata": {"a": "b"}}).encode(),
        json.dumps(f"{base}library/re.html").encode(),
        json.dumps({"url": f"{base}library/sys.html", "callback": "other", "cb_kwargs": {"extra": 7}}).encode(),
    ]
    # lpush, consumed oldest first: the bad ones arrive before the good ones
    redis_client.lpush("probe:start_urls", *bad, *good)
    assert worker.wait() == 0, worker.output[-3000:]
    items = [json.loads(line) for line in out.read_text().splitlines()]
    by_url = {}
    for item in items:
        by_url.setdefault(item["url"].removeprefix(base), []).append(item)
    assert sorted(by_url) == ["library/json.html", "library/os.html", "library/re.html", "library/sys.html"]
    assert len(by_url["library/json.html"]) == 1
    os_item = by_url["library/os.html"][0]
    assert os_item["probe"] == "hello"
    assert (os_item["method"], os_item["body"]) == ("GET", "")  # the unknown key is not form data
    assert by_url["library/sys.html"][0] == {"url": f"{base}library/sys.html", "callback": "other", "extra": 7}
    assert "ignored unknown keys 'formdata'" in worker.output
    reasons = {"bad_url": 3, "bad_scheme": 2, "not_object": 2, "not_utf8": 1, "too_large": 1}
    for reason, count in reasons.items():
        assert worker.stat(f"start_urls/refused/{reason}") == count, reason
    invalid = [json.loads(r) for r in redis_client.lrange("probe:start_urls:invalid", 0, -1)]
    assert sorted(r["reason"] for r in invalid) == sorted(r for r, n in reasons.items() for _ in range(n))
    assert "s3cret-pw" not in worker.output and "user:***@127.0.0.60" in worker.output
    # the dead letter is the payload as pushed (data: fixed and pushed again from there)
    assert any(r.get("payload") == bad[-1].decode() for r in invalid)
    assert [r for r in invalid if r["reason"] == "not_utf8"][0].keys() >= {"payload_base64"}
    huge = bad[-2]
    big = next(r for r in invalid if r["reason"] == "too_large")
    assert big["size"] == len(huge) and len(big["payload"]) == 65536
    assert "Traceback" not in worker.output


@pytest.mark.slow
@pytest.mark.parametrize("persist", ["True", "False"])
def test_sigint_leaves_shared_state_for_the_other_worker(
    persist, docs_site, expected_pages, start_worker, redis_url, redis_client, mysql_url, mysql_query
):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    slow = {**DISTRIBUTED, "SCHEDULER_PERSIST": persist, "CONCURRENT_REQUESTS": "4", "DOWNLOAD_DELAY": "0.02"}
    first, second = start_worker(settings=slow, env=env), start_worker(settings=slow, env=env)
    first.wait_for("Joined the crawl")
    second.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{docs_site.url}index.html")
    deadline = time.monotonic() + 60
    while len(stored_urls_mysql(mysql_query)) < 60 and time.monotonic() < deadline:
        time.sleep(0.2)
    first.signal(signal.SIGINT)
    assert first.wait(60) == 0
    assert second.proc.poll() is None, "the second worker stopped too"
    # the stopped worker left the queue and the dupefilter to the other one
    assert int(redis_client.get("site:dupefilter:count")) > 60
    assert redis_client.exists("site:requests")
    assert not redis_client.exists(f"site:leases:{first.output.split('as node ')[1].split()[0]}")
    assert second.wait() == 0, second.output[-3000:]
    urls = stored_urls_mysql(mysql_query)
    assert len(urls) == len(set(urls))
    assert set(urls) == expected_pages


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"REDIS_URL": "redis://:s3cretpw@127.0.0.1:1/0"}, "REDIS_URL"),
        ({"REDIS_URL": "redis://127.0.0.1:notaport/0"}, "REDIS_URL"),
        ({"REDIS_URL": "http://u:s3cretpw@x"}, "REDIS_URL"),
        ({"REDIS_URL": "redis://:s3cretpw@127.0.0.1:6379/abc"}, "REDIS_URL"),
        ({"MYSQL_URL": "mysql://root:s3cretpw@127.0.0.1:1/test"}, "MYSQL_URL"),
        ({"MYSQL_URL": "mysql://nobody:s3cretpw@127.0.0.1:3306/test"}, "MYSQL_URL"),
        ({"MYSQL_URL": "mysql://root:s3cretpw@127.0.0.1:xx/test"}, "MYSQL_URL"),
        ({"MYSQL_URL": "postgres://u:s3cretpw@h/db"}, "MYSQL_URL"),
        # passwords not percent-encoded: the URL parser would take a piece of them for the host
        ({"REDIS_URL": "redis://:s3cretpw#x@w/rd@127.0.0.1:1/0"}, "REDIS_URL"),
        ({"REDIS_URL": "redis+sentinel://:s3cretpw/x@127.0.0.1:1/mymaster"}, "REDIS_URL"),
        ({"MYSQL_URL": "mysql://root:s3cretpw/x@127.0.0.1:3306/test"}, "MYSQL_URL"),
    ],
)
def test_bad_connection_settings_give_one_clear_line(env, setting, start_worker, tmp_path):
    worker = start_worker(
        settings={"SQLITE_PATH": str(tmp_path / "x.sqlite3")}, env=env, args=["-a", "url=http://127.0.0.9:1/"]
    )
    assert worker.wait(60) == 1
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1, worker.output
    assert setting in errors[0]
    assert lines_after_the_error(worker.output) == [], worker.output[-3000:]
    assert "Traceback" not in worker.output
    assert "s3cretpw" not in worker.output


#: Scrapy's own lines when a crawl closes (the stats dump follows the second one).
CLOSING = (
    "[scrapy.core.engine] INFO: Closing spider (config_error)",
    "[scrapy.statscollectors] INFO: Dumping Scrapy stats:",
    "[scrapy.core.engine] INFO: Spider closed (config_error)",
)
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] (INFO|WARNING|ERROR|CRITICAL): ")


def lines_after_the_error(output: str) -> list[str]:
    """The INFO and higher log lines after the first ERROR line, but for Scrapy's closing lines."""
    lines = [line for line in output.splitlines() if LOG_LINE.match(line)]
    first = next(i for i, line in enumerate(lines) if " ERROR: " in line)
    return [line for line in lines[first + 1 :] if not any(c in line for c in CLOSING)]


def test_redis_down_at_start_is_one_line(start_worker, mysql_url, tmp_path):
    """A worker whose Redis is down stops with the error line and nothing else of its own: no
    replay warning, no progress line, no metrics server."""
    worker = start_worker(env={"REDIS_URL": "redis://127.0.0.1:1/0", "MYSQL_URL": mysql_url})
    assert worker.wait(60) == 1
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "REDIS_URL redis://127.0.0.1:1/0: cannot use Redis" in errors[0], worker.output[-3000:]
    assert lines_after_the_error(worker.output) == [], worker.output[-3000:]


def test_scrapy_crawl_is_scrapys_own(installed_metadata):
    """The package adds commands and replaces none of Scrapy's: ``scrapy crawl`` of an unknown
    spider is Scrapy's own failure, with the package's commands listed beside Scrapy's."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{installed_metadata}"}
    run = {"cwd": ROOT, "env": env, "capture_output": True, "text": True, "timeout": 60}
    done = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "nosuch"], **run)
    assert done.returncode == 1 and "Spider not found: nosuch" in done.stderr, done.stderr[-2000:]
    listed = subprocess.run([sys.executable, "-m", "scrapy", "-h"], **run)
    assert "  crawl " in listed.stdout and "  status " in listed.stdout, listed.stdout
    probe = (
        "from scrapy.cmdline import _get_commands_dict; from scrapy.utils.project import get_project_settings; "
        "print(type(_get_commands_dict(get_project_settings(), True)['crawl']).__module__)"
    )
    module = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert module.stdout.strip() == "scrapy.commands.crawl", module.stderr[-2000:]


def test_redis_wrong_password(start_worker, tmp_path, throwaway_redis):
    url = f"redis://:s3cretpw@127.0.0.1:{throwaway_redis(requirepass='right-one').port}/0"
    worker = start_worker(
        settings={"SQLITE_PATH": str(tmp_path / "x.sqlite3")},
        env={"REDIS_URL": url},
        args=["-a", "url=http://127.0.0.9:1/"],
    )
    assert worker.wait(60) == 1
    assert "REDIS_URL redis://:***@" in worker.output and "authentication failed" in worker.output.lower()
    assert "s3cretpw" not in worker.output and "Traceback" not in worker.output


@pytest.mark.parametrize(
    ("settings", "name"),
    [
        ({"FRONTIER_PREFETCH": "-1"}, "FRONTIER_PREFETCH"),
        ({"FRONTIER_NODE_TIMEOUT": "1", "FRONTIER_HEARTBEAT_INTERVAL": "5"}, "FRONTIER_NODE_TIMEOUT"),
        ({"STORAGE_BATCH_SIZE": "abc"}, "STORAGE_BATCH_SIZE"),
        ({"REDIS_CACHE_TTL": "-5"}, "REDIS_CACHE_TTL"),
        ({"RETRY_BACKOFF_BASE": "soon"}, "RETRY_BACKOFF_BASE"),
        ({"VALIDATION_ENABLED": "maybe"}, "VALIDATION_ENABLED"),
        ({"STORAGE_BATCH_SIZE": "0"}, "STORAGE_BATCH_SIZE"),
        ({"MAX_IDLE_TIME_BEFORE_CLOSE": "-1"}, "MAX_IDLE_TIME_BEFORE_CLOSE"),
        # Scrapy's scraper would run a callback's output through no task: every item and link lost.
        ({"CONCURRENT_ITEMS": "0"}, "CONCURRENT_ITEMS"),
        # Read by two components (the scheduler and the politeness middleware): one line all the same.
        ({"DOMAIN_RATE_LIMIT": "-1"}, "DOMAIN_RATE_LIMIT"),
        ({"POLITENESS_REFRESH": "0"}, "POLITENESS_REFRESH"),
        # read by the add-on too, before the component that reports it
        ({"POLITENESS_ENABLED": "maybe"}, "POLITENESS_ENABLED"),
        ({"DOMAIN_RATE_LIMITS": '{"a.example": "nan"}'}, "DOMAIN_RATE_LIMITS"),
        ({"DOMAIN_CONCURRENCY": "-2"}, "DOMAIN_CONCURRENCY"),
        ({"COOKIES_SHARED": "maybe"}, "COOKIES_SHARED"),
    ],
)
def test_bad_numeric_settings_stop_the_crawl_with_one_line(settings, name, start_worker, redis_url):
    worker = start_worker(settings=settings, env={"REDIS_URL": redis_url}, args=["-a", "url=http://127.0.0.9:1/"])
    assert worker.wait(60) == 1
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and f"Setting {name}=" in errors[0], worker.output[-3000:]
    assert "Traceback" not in worker.output
    # no start line that would read as if the defaults standing in for the refused value applied
    assert "Politeness for the whole crawl" not in worker.output


@pytest.mark.parametrize(
    ("name", "value", "distributed"),
    [
        # Scrapy's own getint()/getfloat() would end the crawl in a traceback and exit status 1,
        ("CONCURRENT_REQUESTS", "abc", False),
        ("CONCURRENT_REQUESTS", "1e3", True),
        ("CONCURRENT_REQUESTS_PER_DOMAIN", "abc", True),
        ("DOWNLOAD_TIMEOUT", "abc", False),
        ("DEPTH_LIMIT", "abc", True),
        ("RETRY_TIMES", "abc", False),
        ("CLOSESPIDER_PAGECOUNT", "many", False),
        # a crawl with no request slot would hang, nothing fetched and never idle,
        ("CONCURRENT_REQUESTS", "0", False),
        ("CONCURRENT_REQUESTS", "-3", True),
        # and these would be taken silently.
        ("DOWNLOAD_DELAY", "-1", True),
        ("DEPTH_LIMIT", "-1", False),
        ("DOWNLOAD_MAXSIZE", "-1", False),
        ("AUTOTHROTTLE_TARGET_CONCURRENCY", "0", True),
        ("AUTOTHROTTLE_MAX_DELAY", "soon", False),
        # a first delay of forever: one request, then nothing for as long
        ("AUTOTHROTTLE_START_DELAY", "inf", True),
        # Scrapy's getbool() too, which the add-on reads before Scrapy's components
        ("AUTOTHROTTLE_ENABLED", "maybe", True),
        ("COOKIES_ENABLED", "maybe", True),
        ("ROBOTSTXT_OBEY", "maybe", False),
    ],
)
def test_bad_scrapy_settings_stop_the_crawl_with_one_line(name, value, distributed, start_worker, redis_url):
    """Scrapy's numeric settings are checked once, by the add-on, in either mode."""
    env = {"REDIS_URL": redis_url} if distributed else {}
    worker = start_worker(settings={name: value}, env=env, args=["-a", "url=http://127.0.0.9:1/"])
    assert worker.wait(60) == 1, worker.output[-3000:]
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and f"Setting {name}={value!r}" in errors[0], worker.output[-3000:]
    assert "Traceback" not in worker.output


@pytest.mark.parametrize(("name", "value"), [("DOMAIN_RATE_LIMIT", "abc"), ("COOKIES_SHARED", "maybe")])
def test_a_bad_distributed_setting_stops_an_embedded_crawl_too(name, value, start_worker):
    """A setting that only acts in distributed mode is checked in embedded mode all the same: a
    typo does not wait for the day the crawl goes distributed."""
    worker = start_worker(settings={name: value}, args=["-a", "url=http://127.0.0.9:1/"])
    assert worker.wait(60) == 1, worker.output[-3000:]
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and f"Setting {name}={value!r}" in errors[0], worker.output[-3000:]
    assert "Traceback" not in worker.output


@pytest.mark.core
@pytest.mark.parametrize("url", ["", "ftp://x", "notaurl", "http://ok.invalid/ \udcff"])
def test_bad_url_argument_stops_with_a_non_zero_exit_status(url, start_worker, tmp_path):
    worker = start_worker(args=["-a", f"url={url}"])
    assert worker.wait(60) == 1
    assert "Refused -a url=" in worker.output and "Traceback" not in worker.output
    assert not (tmp_path / "crawl.sqlite3").exists()  # stopped before the storage opened its database


@pytest.mark.slow
def test_cache_never_skips_an_item_the_database_did_not_get(docs_site, start_worker, redis_url, mysql_url, mysql_query):
    """A crawl with storage off fills the cache; the next crawl must still store every page,
    and only a third crawl, with the pages unchanged, skips the writes."""
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    small = {**DISTRIBUTED, "MAX_IDLE_TIME_BEFORE_CLOSE": "1", "DEPTH_LIMIT": "1"}
    args = ["-a", f"url={docs_site.url}library/json.html"]
    first = start_worker(settings={**small, "STORAGE_ENABLED": "False"}, env=env, args=args)
    assert first.wait() == 0
    cached = first.stat("cache/checked")  # the lean cache (default): read, nothing written until stored
    assert cached > 5
    second = start_worker(settings=small, env=env, args=args)
    assert second.wait() == 0
    assert second.stat("storage/skipped/unchanged") == 0
    assert mysql_query("SELECT COUNT(*) FROM pages")[0][0] == cached
    third = start_worker(settings=small, env=env, args=args)
    assert third.wait() == 0
    assert third.stat("storage/skipped/unchanged") == cached


@pytest.mark.parametrize("as_set", [False, True])
def test_start_urls_of_the_wrong_redis_type_give_one_line(as_set, start_worker, redis_url, redis_client, tmp_path):
    """A start-URL key that is a set where a list is expected (or the reverse) stops the worker
    at start with one line naming the key, what it is and the setting, not an error a second."""
    if as_set:
        redis_client.rpush("site:start_urls", "http://127.0.0.9:1/")
    else:
        redis_client.sadd("site:start_urls", "http://127.0.0.9:1/")
    worker = start_worker(
        settings={"SQLITE_PATH": str(tmp_path / "x.sqlite3"), "REDIS_START_URLS_AS_SET": str(as_set)},
        env={"REDIS_URL": redis_url},
    )
    assert worker.wait(60) == 1, worker.output[-3000:]
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert (
        len(errors) == 1
        and "site:start_urls is a Redis " + ("list" if as_set else "set") in errors[0]
        and "REDIS_START_URLS_AS_SET" in errors[0]
    ), worker.output
    assert "Traceback" not in worker.output


def test_a_key_retyped_mid_crawl_is_one_line_and_the_worker_goes_on(start_worker, redis_url, redis_client, tmp_path):
    worker = start_worker(
        settings={"SQLITE_PATH": str(tmp_path / "x.sqlite3"), "MAX_IDLE_TIME_BEFORE_CLOSE": "8"},
        env={"REDIS_URL": redis_url},
    )
    worker.wait_for("Joined the crawl")
    redis_client.sadd("site:start_urls", "http://127.0.0.9:1/")
    worker.wait_for("WRONGTYPE")
    time.sleep(3)  # three more rounds of the frontier's task meet it
    redis_client.delete("site:start_urls")
    assert worker.wait(60) == 0, worker.output[-3000:]
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "Redis refused a frontier call (ResponseError: WRONGTYPE" in errors[0], worker.output[
        -3000:
    ]
    assert "Traceback" not in worker.output
    assert worker.stat("frontier/task_errors") >= 3
