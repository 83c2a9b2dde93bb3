"""Fixtures: real servers on loopback.

- ``docs_site``: Debian's python3.11-doc HTML served by a Python HTTP server on 127.0.0.x.
- ``debian_doc_sites``: Debian's documentation in Japanese, Russian and Chinese (DocBook and
  Sphinx sites), each served the same way.
- ``redis_url``: the machine's Redis, database ``TEST_REDIS_DB`` (default 13) plus the index of the
  pytest-xdist worker (``tests/run.sh`` runs 3: databases 13, 14 and 15); each test deletes only the
  keys of its own spider names before and after it runs.
- ``mysql_url``: the machine's MariaDB, a database of the test session's own, dropped at the end.
- ``crawl()`` / ``start_worker()``: real ``scrapy crawl`` processes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pymysql
import pytest
import redis

from tests.servers import DOCS, HttpServer, MariaDB, RedisCluster, RedisServer

ROOT = Path(__file__).resolve().parent.parent

# A suite started in the background (`bash tests/run.sh &` in a script) ignores SIGINT, and so
# would every worker and command the tests start and then stop with SIGINT: they would never
# stop. Python's own handler here makes the children start with the default again.
signal.signal(signal.SIGINT, signal.default_int_handler)
REDIS_HOST = os.environ.get("TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("TEST_REDIS_PORT", "6379"))
#: pytest-xdist runs tests in parallel processes (gw0, gw1, ...): each has a Redis database of its own,
#: so two tests using the same spider name never share keys.
XDIST_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
REDIS_DB = int(os.environ.get("TEST_REDIS_DB", "13")) + XDIST_WORKER
MYSQL_HOST = os.environ.get("TEST_MYSQL_HOST", "127.0.0.1")
MYSQL_PORT = int(os.environ.get("TEST_MYSQL_PORT", "3306"))
#: Spider names the tests use; their keys are the only ones a test deletes.
#: test_user_project.py: the spiders of the user's project it generates (its redis_key is user_redis:seeds).
#: test_scrapy_redis_example.py: scrapy-redis's example project, its spiders and their keys' prefixes
#: (myspider:start_urls, mycrawler:start_urls).
#: test_compat.py: tests/spiders/compat.py's (compat_redis's redis_key: compat_redis:seeds).
#: test_scrapy_redis_fates.py: tests/spiders/fates.py's (its keys renamed by the scrapy-redis key settings).
#: test_scrapy_versions.py: tests/spiders/legacy.py's.
SPIDERS = (
    *("site", "probe", "offsite", "modules", "kinds", "user_redis", "user_pages", "user_sitemap", "user_bad"),
    *("dmoz", "myspider_redis", "mycrawler_redis", "myspider", "mycrawler"),
    *("compat_redis", "compat_plain", "compat_bad", "compat_bad_redis", "fates", "wheel"),
    *("legacy", "rules"),
)

# Settings every test crawl gets: no AutoThrottle warm-up, no telnet port clashes.
FAST = {
    "AUTOTHROTTLE_ENABLED": "False",
    # every worker its own CONCURRENT_REQUESTS_PER_DOMAIN, so that the workers of a one-host test
    # site share its pages (the polite default, one worker's 8 for the whole crawl, lets the worker
    # that finishes a page take the next: test_politeness.py's tests of the defaults)
    "DOMAIN_CONCURRENCY": "0",
    "TELNETCONSOLE_ENABLED": "False",
    "LOG_LEVEL": "INFO",
    "FRONTIER_HEARTBEAT_INTERVAL": "1",
    "FRONTIER_NODE_TIMEOUT": "4",
    "RETRY_BACKOFF_BASE": "0.05",
}


def pytest_collection_modifyitems(config, items):
    """Slow tests first: the parallel workers (pytest-xdist) then end together instead of one of
    them finishing a long test alone. ``CRAWLER_TIMING=skip`` leaves out the tests marked
    ``timing``, ``CRAWLER_TIMING=only`` every other (tests/run.sh runs them apart, one at a time)."""
    timing = os.environ.get("CRAWLER_TIMING", "")
    if timing in ("skip", "only"):
        keep, dropped = [], []
        for item in items:
            (keep if (item.get_closest_marker("timing") is None) == (timing == "skip") else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def installed_metadata(tmp_path_factory) -> Path:
    """A directory holding this repository's package metadata (``setup.py egg_info``), as
    ``pip install`` leaves it: on ``PYTHONPATH`` with the repository root, a user's project gets
    the ``scrapy.commands`` entry points (``scrapy crawl`` exiting 2 when a setting stops the crawl)
    without installing anything into the venv."""
    base = tmp_path_factory.mktemp("metadata")
    subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(base)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return base


@pytest.fixture(scope="session")
def docs_site():
    if not (DOCS / "index.html").exists():
        pytest.fail(
            f"{DOCS} is missing: install Debian's python3.11-doc (apt-get install python3.11-doc) or set DOCS_DIR"
        )
    server = HttpServer(DOCS, "127.0.0.2")
    yield server
    server.stop()


#: Debian's doc sites in other languages: name -> (Debian package, directory, start page).
DEBIAN_DOC_SITES = {
    "aptitude-ja": ("aptitude-doc-ja", Path("/usr/share/doc/aptitude/html/ja"), "index.html"),
    "aptitude-ru": ("aptitude-doc-ru", Path("/usr/share/doc/aptitude/html/ru"), "index.html"),
    "developers-reference-ru": ("developers-reference-ru", Path("/usr/share/developers-reference/ru"), "index.html"),
    "debian-reference-zh-cn": ("debian-reference-zh-cn", Path("/usr/share/debian-reference"), "index.zh-cn.html"),
}


@pytest.fixture(scope="session")
def debian_doc_sites():
    """Each site of :data:`DEBIAN_DOC_SITES` served on 127.0.0.16 (a port each):
    ``{name: (server, directory, start page)}``."""
    missing = [package for package, directory, start in DEBIAN_DOC_SITES.values() if not (directory / start).is_file()]
    if missing:
        pytest.fail(f"Debian's doc sites are missing: apt-get install {' '.join(missing)}")
    servers = {
        name: (HttpServer(directory, "127.0.0.16"), directory, start)
        for name, (_, directory, start) in DEBIAN_DOC_SITES.items()
    }
    yield servers
    for server, _, _ in servers.values():
        server.stop()


@pytest.fixture
def tutorial_site(tmp_path):
    """The docs' ``tutorial/`` directory alone on a server of its own (links out of it are 404s),
    and the URLs of its pages reachable from ``tutorial/index.html``: ``(server, expected)``.
    The server's root is ``tmp_path / "tutorial-site"``; its access log gives ``server.fetches()``."""
    import shutil

    from tests.oracle import reachable_pages

    root = tmp_path / "tutorial-site"
    shutil.copytree(DOCS / "tutorial", root / "tutorial")
    server = HttpServer(root, "127.0.0.4", log=tmp_path / "tutorial-site.log")
    yield server, {server.url + p for p in reachable_pages(root, "tutorial/index.html")}
    server.stop()


@pytest.fixture(scope="session")
def expected_pages(docs_site) -> set[str]:
    """The HTML pages reachable from index.html, found by walking the files on disk (an oracle
    independent of the spider)."""
    from tests.oracle import reachable_pages

    return {docs_site.url + p for p in reachable_pages(DOCS, "index.html")}


def _clean_redis(client: redis.Redis) -> None:
    crawls = [m for m in client.smembers("scrapy-frontier:crawls") if m.decode().split("@")[0] in SPIDERS]
    if crawls:
        client.srem("scrapy-frontier:crawls", *crawls)
    for spider in SPIDERS:
        keys = list(client.scan_iter(match=f"{spider}:*", count=1000)) + list(
            client.scan_iter(match=f"{spider}@*", count=1000)
        )
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])


@pytest.fixture
def redis_url():
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(
            f"Redis is not reachable at {REDIS_HOST}:{REDIS_PORT} ({exc}): start redis-server or set TEST_REDIS_PORT"
        )
    _clean_redis(client)
    yield f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}"
    _clean_redis(client)
    client.close()


@pytest.fixture
def redis_client(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def mysql_server():
    name = f"crawler_test_{uuid.uuid4().hex[:8]}"
    try:
        conn = pymysql.connect(
            host=MYSQL_HOST,
            port=MYSQL_PORT,
            user="root",
            password=os.environ.get("TEST_MYSQL_PASSWORD", ""),
            autocommit=True,
        )
    except pymysql.err.OperationalError as exc:
        pytest.fail(
            f"MariaDB is not reachable at {MYSQL_HOST}:{MYSQL_PORT} ({exc}): start mariadbd or set TEST_MYSQL_PORT"
        )
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield conn, name
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()


@pytest.fixture
def mysql_url(mysql_server):
    conn, name = mysql_server
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,))
        for (table,) in cur.fetchall():
            cur.execute(f"DROP TABLE `{name}`.`{table}`")
    password = os.environ.get("TEST_MYSQL_PASSWORD", "")
    auth = f"root:{password}" if password else "root"
    return f"mysql://{auth}@{MYSQL_HOST}:{MYSQL_PORT}/{name}"


@pytest.fixture
def backend(mysql_url):
    """A connected MySQLBackend on the test database, with the ``pages`` table."""
    from crawler.items import Page
    from scrapy_frontier.schema import schema_of
    from scrapy_frontier.storage.backends import MySQLBackend

    backend = MySQLBackend(mysql_url)
    backend.connect()
    backend.ensure_table(schema_of(Page))
    yield backend
    backend.close()


@pytest.fixture
def mysql_query(mysql_server):
    conn, name = mysql_server

    def query(sql: str, *args):
        with conn.cursor() as cur:
            cur.execute(f"USE `{name}`")
            cur.execute(sql, args)
            return cur.fetchall()

    return query


def scrapy_command(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``scrapy <command>`` run from the project's directory with only ``env`` (and PATH): its
    exit status and output (text)."""
    return subprocess.run(
        [sys.executable, "-m", "scrapy", *command],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


class Worker:
    """A ``scrapy crawl`` process; its log is kept in a file."""

    def __init__(self, spider: str, settings: dict[str, str], env: dict[str, str], args: list[str], log: Path) -> None:
        cmd = [sys.executable, "-m", "scrapy", "crawl", spider]
        for k, v in {**FAST, **settings}.items():
            cmd += ["-s", f"{k}={v}"]
        cmd += args
        self.log_path = log
        self._log = log.open("wb")
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
        for var in ("REDIS_URL", "MYSQL_URL"):
            if var not in env:
                full_env.pop(var, None)
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 240) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"worker did not finish in {timeout}s; log:\n{self.output[-5000:]}") from None

    def signal(self, sig: int = signal.SIGINT) -> None:
        self.proc.send_signal(sig)

    @property
    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stat(self, name: str) -> int:
        """A numeric value from the final stats dump (0 when absent)."""
        m = re.search(rf"'{re.escape(name)}': (\d+)", self.output)
        return int(m.group(1)) if m else 0

    def wait_for(self, pattern: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.output):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not seen in the worker log:\n{self.output[-5000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def start_worker(tmp_path):
    workers: list[Worker] = []

    def start(
        spider: str = "site",
        settings: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> Worker:
        defaults = {"SQLITE_PATH": str(tmp_path / "crawl.sqlite3"), "DEAD_LETTER_DIR": str(tmp_path)}
        worker = Worker(
            spider, {**defaults, **(settings or {})}, env or {}, args or [], tmp_path / f"worker{len(workers)}.log"
        )
        workers.append(worker)
        return worker

    yield start
    for w in workers:
        w.stop()


@pytest.fixture
def start_workers(start_worker):
    """``start_workers(n, spider="site", settings=..., env=...)``: n workers that have joined the crawl."""

    def start(n: int, spider: str = "site", **kwargs) -> list[Worker]:
        workers = [start_worker(spider, **kwargs) for _ in range(n)]
        for w in workers:
            w.wait_for("Joined the crawl")
        return workers

    return start


@pytest.fixture
def throwaway_redis(tmp_path):
    """``start(**redis_server_options) -> RedisServer``; every server is stopped at the end."""
    servers: list[RedisServer] = []

    def start(**options: str) -> RedisServer:
        directory = tmp_path / f"redis{len(servers)}"
        directory.mkdir()
        servers.append(RedisServer(directory, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def throwaway_mariadb(tmp_path):
    db = MariaDB(tmp_path / "mariadb")
    yield db
    db.stop()


@pytest.fixture
def redis_cluster(tmp_path):
    """A 3-master Redis Cluster of its own (six redis-server processes), stopped at the end."""
    cluster = RedisCluster(tmp_path / "cluster")
    yield cluster
    cluster.stop()
