"""At-least-once under faults: killed workers, a restarted Redis, a stopped MySQL, SIGTERM,
URLs that fail for good, a MySQL connection closed while idle and a table dropped mid-crawl. Real
processes, real servers; each test prints its figures (run with ``-s`` to see them): pages
expected, stored, duplicates (rows; fetches beyond one per URL), leases left, pending items left."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.oracle import reachable_pages
from tests.servers import DOCS, HttpServer

#: Whole crawls with servers stopped, killed or installed: minutes (pytest -m "not slow" skips them).
pytestmark = pytest.mark.slow

#: DOWNLOAD_DELAY holds for the whole crawl: about 66 pages a second from all the workers together.
SLOW = {"MAX_IDLE_TIME_BEFORE_CLOSE": "4", "CONCURRENT_REQUESTS": "4", "DOWNLOAD_DELAY": "0.015"}


@pytest.fixture
def logged_site(tmp_path):
    """The docs site on its own server, with an access log to count fetches."""
    server = HttpServer(DOCS, "127.0.0.7", log=tmp_path / "access.log")
    yield server
    server.stop()


def expected(site) -> set[str]:
    return {site.url + p for p in reachable_pages(DOCS, "index.html")}


def leases_left(client) -> int:
    # each lease hash also holds its mark, '@' (frontier_lease), which is no lease
    return sum(client.hlen(k) - client.hexists(k, "@") for k in client.scan_iter(match="site:*leases*"))


def report(name: str, site, urls: list[str], client, pending: int = 0) -> dict:
    fetches = site.fetches()
    html = {p: n for p, n in fetches.items() if p.endswith(".html")}
    figures = {
        "scenario": name,
        "pages_expected": len(expected(site)),
        "pages_stored": len(set(urls)),
        "duplicate_rows": len(urls) - len(set(urls)),
        "extra_fetches": sum(n - 1 for n in html.values() if n > 1),
        "leases_left": leases_left(client),
        "pending_left": pending,
    }
    print("FIGURES", json.dumps(figures))
    return figures


def wait_stored(count_fn, at_least: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while count_fn() < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {at_least} pages stored after {timeout}s")
        time.sleep(0.2)


def count_or_zero(query) -> int:
    try:
        return query("SELECT COUNT(*) FROM pages")[0][0]
    except Exception:
        return 0


@pytest.mark.core
def test_sigkill_every_three_seconds(logged_site, start_worker, redis_url, redis_client, mysql_url, mysql_query):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    # A crawl of 20 s or more: time for several kills. A killed worker's leases come back after
    # FRONTIER_NODE_TIMEOUT (8 s here, 30 by default), so the crawl does not wait for the last one.
    slower = {**SLOW, "DOWNLOAD_DELAY": "0.08", "FRONTIER_HEARTBEAT_INTERVAL": "2", "FRONTIER_NODE_TIMEOUT": "8"}
    pages = len(expected(logged_site))
    workers = [start_worker(settings=slower, env=env) for _ in range(3)]
    for w in workers:
        w.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{logged_site.url}index.html")
    kills = 0
    victim = workers[0]
    while kills < 8 and any(w.proc.poll() is None for w in workers[1:]):
        time.sleep(3)
        if count_or_zero(mysql_query) >= pages:
            break
        victim.proc.kill()
        victim.proc.wait()
        kills += 1
        victim = start_worker(settings=slower, env=env)
        workers.append(victim)
    for w in workers:
        if w.proc.poll() is None:
            assert w.wait(180) == 0, w.output[-3000:]
    urls = [r[0] for r in mysql_query("SELECT url FROM pages")]
    figures = report("sigkill", logged_site, urls, redis_client)
    print("FIGURES", json.dumps({"kills": kills}))
    assert kills >= 3
    assert set(urls) == expected(logged_site)
    assert figures["duplicate_rows"] == 0 and figures["leases_left"] == 0
    assert any("Reclaimed" in w.output for w in workers)


def two_workers_100_pages_in(server, site, start_worker, mysql_url, mysql_query):
    """Two workers crawling ``site`` on the throwaway Redis ``server``, once 100 pages are
    stored: ``(client of that Redis, workers)``."""
    import redis

    url = f"redis://127.0.0.1:{server.port}/0"
    client = redis.Redis.from_url(url)
    env = {"REDIS_URL": url, "MYSQL_URL": mysql_url}
    workers = [start_worker(settings=SLOW, env=env) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    client.lpush("site:start_urls", f"{site.url}index.html")
    wait_stored(lambda: count_or_zero(mysql_query), 100)
    return client, workers


def test_redis_restart_mid_crawl(logged_site, start_worker, throwaway_redis, mysql_url, mysql_query):
    import redis

    server = throwaway_redis(appendonly="yes", appendfsync="always")
    client, workers = two_workers_100_pages_in(server, logged_site, start_worker, mysql_url, mysql_query)
    server.stop()
    time.sleep(3)
    server.start()
    client.close()
    client = redis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0")
    for w in workers:
        assert w.wait(180) == 0, w.output[-3000:]
    urls = [r[0] for r in mysql_query("SELECT url FROM pages")]
    figures = report("redis_restart", logged_site, urls, client)
    assert set(urls) == expected(logged_site)
    assert figures["leases_left"] == 0
    outage = [w for w in workers if "Redis unreachable" in w.output]
    assert outage and all("Redis is reachable again" in w.output for w in outage)
    for w in workers:
        # one line when the outage starts, one when it ends, for the whole worker: not one per
        # call, nor one per component (heartbeat, cache, metrics, robots.txt, replay)
        # (what a restart may leave behind has lines of its own: a worker taken for dead, leases
        # whose reply was lost when Redis stopped)
        after_effects = ("Reclaimed", "rejoining", "without knowing")
        problems = [line for line in redis_lines(w.output) if not any(a in line for a in after_effects)]
        shown = "\n".join(problems)
        assert [line for line in problems if " ERROR: " in line] == [
            line for line in problems if "Redis unreachable" in line
        ], shown
        assert len(problems) == 2 * ("Redis unreachable" in w.output), shown
        assert (
            w.output.count("Redis is reachable again") == w.output.count("Redis unreachable")
            and "Traceback" not in w.output
        )
    client.close()


def test_redis_restarted_empty_mid_crawl_is_never_reported_as_finished(
    logged_site, start_worker, throwaway_redis, mysql_url, mysql_query
):
    """Redis without persistence, restarted mid-crawl: the crawl's state is gone. Each worker
    says so in one ERROR line, none says the crawl finished or that it rejoins, none writes the
    crawl back into the empty Redis, and each exits with status 1."""
    import redis

    server = throwaway_redis()
    client, workers = two_workers_100_pages_in(server, logged_site, start_worker, mysql_url, mysql_query)
    server.stop()
    time.sleep(3)
    server.start()
    client.close()
    for w in workers:
        assert w.wait(120) == 1, w.output[-3000:]
        assert w.output.count("The crawl's state in Redis is gone") == 1, w.output[-3000:]
        assert "Crawl finished" not in w.output and "rejoining" not in w.output
        assert "'finish_reason': 'state_lost'" in w.output
    client = redis.Redis.from_url(server.url)
    # no worker claimed a crawl in the empty Redis (the links a worker queued before it noticed,
    # if any, are URLs of the crawl, for a new start to take)
    assert not client.exists("site:dupefilter:meta")
    stored = count_or_zero(mysql_query)
    print("FIGURES", json.dumps({"scenario": "redis_restart_empty", "pages_stored": stored}))
    assert 100 <= stored < len(expected(logged_site))
    client.close()


def redis_lines(output: str) -> list[str]:
    """The WARNING and ERROR lines of a worker's log."""
    return [line for line in output.splitlines() if " WARNING: " in line or " ERROR: " in line]


def test_redis_out_of_memory_mid_crawl(logged_site, start_worker, throwaway_redis, mysql_url, mysql_query):
    """Redis at maxmemory with noeviction refuses writes: each worker says so once (with Redis's
    figures), waits without a traceback, keeps beating (no live worker is taken for dead), and
    says once that Redis accepts writes again after maxmemory is raised; a worker stopped while
    Redis is full gives back its leases and exits; nothing is lost."""
    server = throwaway_redis(**{"maxmemory-policy": "noeviction"})
    client, workers = two_workers_100_pages_in(server, logged_site, start_worker, mysql_url, mysql_query)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used * 8 // 10)
    for w in workers:
        w.wait_for("Redis refuses writes", 30)
    # Longer than FRONTIER_NODE_TIMEOUT (4 s): a worker whose heartbeat were refused would be
    # taken for dead once memory is raised.
    time.sleep(12)
    stored_meanwhile = count_or_zero(mysql_query)
    held = leases_left(client)
    # One worker stopped meanwhile gives back what it holds, Redis full as it is.
    leaving = workers[1]
    leaving.signal()
    assert leaving.wait(60) == 0, leaving.output[-3000:]
    assert "Returned " in leaving.output and "Could not return leases" not in leaving.output
    client.config_set("maxmemory", 256 << 20)
    for w in workers:
        assert w.wait(180) == 0, w.output[-3000:]
    urls = [r[0] for r in mysql_query("SELECT url FROM pages")]
    figures = report("redis_out_of_memory", logged_site, urls, client, client.llen("site:items:pending"))
    print(
        "FIGURES",
        json.dumps(
            {
                "leases_held_while_refused": held,
                "stored_at_raise": stored_meanwhile,
                "refused_writes": [w.stat("frontier/redis_refused_writes") for w in workers],
            }
        ),
    )
    assert set(urls) == expected(logged_site)
    assert figures["duplicate_rows"] == 0 and figures["leases_left"] == 0 and figures["pending_left"] == 0
    for w in workers:
        lines = redis_lines(w.output)
        assert len(lines) == 2, lines
        error, back = lines
        if w is leaving:  # it left before Redis accepted writes again: the links it held are forgone
            assert " WARNING: Redis is out of memory: the " in back and "go back to the frontier" in back
            back = " WARNING: Redis accepts writes again after "
        assert (
            " ERROR: Redis refuses writes: it is out of memory (used_memory " in error
            and "maxmemory " in error
            and "CONFIG SET maxmemory" in error
        )
        assert " WARNING: Redis accepts writes again after " in back
        assert "Traceback" not in w.output and "unreachable" not in w.output
        assert w.stat("frontier/redis_out_of_memory") == 1
    client.close()


def test_mysql_stopped_for_20_seconds(logged_site, start_worker, redis_url, redis_client, throwaway_mariadb):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": throwaway_mariadb.url}
    settings = {**SLOW, "STORAGE_RETRY_TIMEOUT": "5"}
    workers = [start_worker(settings=settings, env=env) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{logged_site.url}index.html")
    wait_stored(lambda: count_or_zero(throwaway_mariadb.query), 60)
    throwaway_mariadb.stop()
    time.sleep(20)
    throwaway_mariadb.start()
    for w in workers:
        assert w.wait(240) == 0, w.output[-3000:]
    urls = [r[0] for r in throwaway_mariadb.query("SELECT url FROM pages")]
    pending = redis_client.llen("site:items:pending")
    figures = report("mysql_stopped_20s", logged_site, urls, redis_client, pending)
    assert set(urls) == expected(logged_site)
    assert figures["duplicate_rows"] == 0 and pending == 0 and figures["leases_left"] == 0
    spilled = sum(w.stat("storage/pending") for w in workers)
    replayed = sum(w.stat("storage/replayed") for w in workers)
    print("FIGURES", json.dumps({"spilled_to_pending": spilled, "replayed": replayed}))
    assert spilled > 0 and replayed == spilled


def test_mysql_connections_killed_twice(
    logged_site, start_worker, redis_url, redis_client, mysql_url, mysql_query, mysql_server
):
    conn, name = mysql_server
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    workers = [start_worker(settings=SLOW, env=env) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{logged_site.url}index.html")
    for threshold in (80, 250):
        wait_stored(lambda: count_or_zero(mysql_query), threshold)
        with conn.cursor() as cur:
            cur.execute(
                "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()", (name,)
            )
            for (conn_id,) in cur.fetchall():
                cur.execute(f"KILL {conn_id}")
    for w in workers:
        assert w.wait(180) == 0, w.output[-3000:]
    urls = [r[0] for r in mysql_query("SELECT url FROM pages")]
    figures = report("mysql_killed_twice", logged_site, urls, redis_client, redis_client.llen("site:items:pending"))
    assert set(urls) == expected(logged_site)
    assert figures["pending_left"] == 0 and figures["leases_left"] == 0


def test_sigterm_returns_leases_at_once(logged_site, start_worker, redis_url, redis_client, mysql_url, mysql_query):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    # The first worker takes 100 requests at a time and fetches one per second: it holds many
    # leases it has not started. The node timeout is a minute, so only a hand-back can free them.
    # 150 pages of the site are start URLs, taken in one batch: the leases do not wait for links
    # found one page a second (on a busy machine that took over a minute to pass 50).
    index = f"{logged_site.url}index.html"
    starts = [index] + sorted(expected(logged_site) - {index})[:149]  # before the worker: seconds of parsing
    holder = start_worker(
        settings={
            **SLOW,
            "FRONTIER_PREFETCH": "100",
            "DOWNLOAD_DELAY": "1",
            # this worker's own delay, and no cap across the workers: it holds what it took
            "DOMAIN_RATE_LIMIT": "0",
            "DOMAIN_CONCURRENCY": "0",
            "CONCURRENT_REQUESTS": "1",
            "FRONTIER_NODE_TIMEOUT": "60",
            "REDIS_START_URLS_BATCH_SIZE": "200",
        },
        env=env,
    )
    holder.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", *starts)
    deadline = time.monotonic() + 60
    while leases_left(redis_client) < 50 and time.monotonic() < deadline:
        time.sleep(0.2)
    held = leases_left(redis_client)
    assert held >= 50, f"the holder took {held} leases in 60 s"
    other = start_worker(settings={**SLOW, "FRONTIER_NODE_TIMEOUT": "60"}, env=env)
    other.wait_for("Joined the crawl")
    stopped_at = time.monotonic()
    holder.signal(signal.SIGTERM)
    while leases_left(redis_client) and time.monotonic() - stopped_at < 30 and holder.proc.poll() is None:
        time.sleep(0.1)
    handed_back = time.monotonic() - stopped_at
    assert holder.wait(30) == 0
    # at the engine's stop (the frontier task's next tick), or when the spider closes, if that
    # comes first (a loaded machine): either way at once, not after the node timeout
    handed = re.search(
        r"returned (\d+) requests not yet started to the frontier|Returned (\d+) leased requests to the frontier",
        holder.output,
    )
    assert handed and int(handed.group(1) or handed.group(2)) >= 40, holder.output[-3000:]
    assert other.wait(180) == 0, other.output[-3000:]
    urls = [r[0] for r in mysql_query("SELECT url FROM pages")]
    figures = report("sigterm", logged_site, urls, redis_client)
    print("FIGURES", json.dumps({"leases_held_at_sigterm": held, "seconds_to_hand_back": round(handed_back, 2)}))
    assert handed_back < 5
    assert set(urls) == expected(logged_site) and figures["leases_left"] == 0


def test_failed_url_is_dead_lettered_then_requeued(flaky_site, start_worker, redis_url, redis_client, tmp_path):
    base, log = flaky_site
    out = tmp_path / "items.jl"
    settings = {
        "SPIDER_MODULES": "tests.spiders",
        "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        "RETRY_TIMES": "2",
        "FEEDS": json.dumps({str(out): {"format": "jsonlines"}}),
    }
    worker = start_worker("probe", settings=settings, env={"REDIS_URL": redis_url})
    worker.wait_for("Joined the crawl")
    redis_client.lpush("probe:start_urls", f"{base}/fixed/a", f"{base}/ok")
    assert worker.wait() == 0
    failed = [json.loads(r) for r in redis_client.lrange("probe:requests:failed", 0, -1)]
    assert [(f["url"], f["reason"], f["status"], f["attempts"]) for f in failed] == [
        (f"{base}/fixed/a", "retries_exhausted", 500, 3)
    ]
    (tmp_path / "requests.log.fixed").touch()  # the server is fixed
    requeue = subprocess.run(
        [sys.executable, "-m", "scrapy", "requeue", "probe", "--json"],
        cwd=ROOT,
        env={"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert requeue.returncode == 0, requeue.stderr
    assert json.loads(requeue.stdout) == {"requeued": 1, "unreadable": 0, "left": 0}
    again = start_worker("probe", settings=settings, env={"REDIS_URL": redis_url})
    again.wait_for("Joined the crawl")
    assert again.wait() == 0
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert [i["url"] for i in items if "/fixed/" in i["url"]] == [f"{base}/fixed/a"]
    assert items[-1]["status"] == 200


@pytest.fixture
def flaky_site(tmp_path):
    from tests.loopback import free_port, wait_port

    host, port, log = "127.0.0.6", free_port("127.0.0.6"), tmp_path / "requests.log"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "flaky_server.py"), host, str(port), str(log)])
    wait_port(host, port)
    yield f"http://{host}:{port}", log
    proc.terminate()
    proc.wait(10)


def probe_worker(start_worker, redis_url: str, mysql_url: str):
    """A distributed ``probe`` worker on ``mysql_url`` that stays up while the crawl is idle;
    each start URL pushed gives one document in the table ``items``."""
    settings = {"SPIDER_MODULES": "tests.spiders", "MAX_IDLE_TIME_BEFORE_CLOSE": "60"}
    worker = start_worker("probe", settings=settings, env={"REDIS_URL": redis_url, "MYSQL_URL": mysql_url})
    worker.wait_for("Joined the crawl")
    return worker


def wait_rows(query, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if query("SELECT COUNT(*) FROM items")[0][0] >= count:
                return
        except Exception:  # the table is not there (yet, or any more)
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} rows in items after {timeout}s")
        time.sleep(0.2)


@pytest.fixture
def short_wait_mariadb(tmp_path):
    """A throwaway mariadbd that closes a connection idle for 3 s (``wait_timeout``)."""
    from tests.servers import MariaDB

    db = MariaDB(tmp_path / "mariadb", "--wait-timeout=3")
    yield db
    db.stop()


def test_an_idle_connection_the_server_closed_is_reopened_quietly(
    docs_site, start_worker, redis_url, redis_client, short_wait_mariadb
):
    """The server closes the storage connection while the worker is idle (8 s, wait_timeout 3 s):
    the next item is stored on a new connection, with no error line - that is not an outage."""
    worker = probe_worker(start_worker, redis_url, short_wait_mariadb.url)
    redis_client.lpush("probe:start_urls", f"{docs_site.url}index.html")
    wait_rows(short_wait_mariadb.query, 1)
    time.sleep(8)
    redis_client.lpush("probe:start_urls", f"{docs_site.url}glossary.html")
    wait_rows(short_wait_mariadb.query, 2)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output[-3000:]
    assert short_wait_mariadb.query("SELECT COUNT(*) FROM items")[0][0] == 2
    assert " ERROR: " not in worker.output and worker.stat("log_count/ERROR") == 0, worker.output[-3000:]
    assert worker.stat("storage/retries") == 0 and worker.stat("item_stored_count") == 2


def test_a_table_dropped_mid_crawl_is_created_again(
    docs_site, start_worker, redis_url, redis_client, mysql_url, mysql_query
):
    """``DROP TABLE items`` while the worker runs: its next batch finds the table missing (MySQL
    error 1146), creates it again from the schema and is written, with one warning line."""
    worker = probe_worker(start_worker, redis_url, mysql_url)
    redis_client.lpush("probe:start_urls", f"{docs_site.url}index.html")
    wait_rows(mysql_query, 1)
    mysql_query("DROP TABLE items")
    redis_client.lpush("probe:start_urls", f"{docs_site.url}glossary.html", f"{docs_site.url}search.html")
    wait_rows(mysql_query, 2)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output[-3000:]
    urls = sorted(json.loads(doc)["url"] for (doc,) in mysql_query("SELECT document FROM items"))
    assert urls == [f"{docs_site.url}glossary.html", f"{docs_site.url}search.html"]
    assert worker.stat("storage/refused") == 0 and redis_client.llen("probe:items:invalid") == 0
    assert " ERROR: " not in worker.output, worker.output[-3000:]
    warnings = [line for line in worker.output.splitlines() if "1146" in line]
    assert len(warnings) == 1 and " WARNING: " in warnings[0] and "items" in warnings[0], worker.output[-3000:]
