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

from tests.loopback import free_cluster_port, free_port, wait_port

ROOT = Path(__file__).resolve().parent.parent
DOCS = Path(os.environ.get("DOCS_DIR", "/usr/share/doc/python3.11/html"))
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
SPIDERS = ("site", "probe", "modules", "kinds", "user_redis", "user_pages", "user_sitemap", "user_bad")

# Settings every test crawl gets: no AutoThrottle warm-up, no telnet port clashes.
FAST = {
    "AUTOTHROTTLE_ENABLED": "False",
    "TELNETCONSOLE_ENABLED": "False",
    "LOG_LEVEL": "INFO",
    "FRONTIER_HEARTBEAT_INTERVAL": "1",
    "FRONTIER_NODE_TIMEOUT": "4",
    "RETRY_BACKOFF_BASE": "0.05",
}


def queued_requests(client: redis.Redis, prefix: bytes = b"site:requests:") -> int:
    """Requests queued in an unsharded frontier: every host of ``site:requests``, each priority
    list of its queue (scrapy_frontier/lua/frontier_queue.lua: priority 0's list, and one per
    score in the host's sorted set of the other priorities)."""
    total = 0
    for host in client.zrange(prefix[:-1], 0, -1):
        queue = prefix + host
        scores = {b"0", *client.zrange(queue, 0, -1)}
        total += sum(client.llen(queue + b"#" + score) for score in scores)
    return total


class HttpServer:
    """``python -m http.server`` (threaded) serving a directory on a 127.0.0.x address."""

    def __init__(self, directory: Path, host: str = "127.0.0.2", log: Path | None = None) -> None:
        self.host = host
        self.port = free_port(host)
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", host, "--directory", str(directory)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb") if log else subprocess.DEVNULL,
        )
        wait_port(host, self.port)
        self.url = f"http://{host}:{self.port}/"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def fetches(self) -> dict[str, int]:
        """GET requests per path, from the access log (needs ``log``)."""
        counts: dict[str, int] = {}
        for match in re.finditer(r'"GET (\S+) HTTP', self.log.read_text(errors="replace")):
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
        return counts


def pytest_collection_modifyitems(config, items):
    """Slow tests first: the parallel workers (pytest-xdist) then end together instead of one of
    them finishing a long test alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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


class RedisServer:
    """A private redis-server on a free port, for tests that stop or reconfigure a server."""

    def __init__(self, directory: Path, port: int | None = None, **options: str) -> None:
        self.port = port or free_port()
        self.cmd = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(directory),
        ]
        for key, value in options.items():
            self.cmd += [f"--{key}", value]
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port("127.0.0.1", self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


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


class MariaDB:
    """A throwaway mariadbd with its own datadir on a free port (no grant tables: any user);
    ``options`` are more mariadbd arguments (``--wait-timeout=3``)."""

    def __init__(self, root: Path, *options: str) -> None:
        self.options = options
        self.datadir = root / "data"
        self.port = free_port()
        self.log = root / "mariadbd.log"
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.proc: subprocess.Popen | None = None
        self.start()
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE crawl CHARACTER SET utf8mb4")
        conn.close()
        self.url = f"mysql://root@127.0.0.1:{self.port}/crawl"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.datadir}/mysqld.sock",
                "--user=root",
                "--skip-grant-tables",
                "--skip-log-bin",
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        wait_port("127.0.0.1", self.port, timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def query(self, sql: str):
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", database="crawl")
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()


@pytest.fixture
def throwaway_mariadb(tmp_path):
    db = MariaDB(tmp_path / "mariadb")
    yield db
    db.stop()


class RedisCluster:
    """A private Redis Cluster on free loopback ports: ``masters`` masters with one replica
    each (``redis-cli --cluster create ... --cluster-replicas 1``), node timeout 2 s."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        for attempt in range(2):  # once more on new ports if a node or the create step fails
            self.nodes: list[RedisServer] = []
            for i in range(2 * masters):
                d = directory / f"try{attempt}" / f"node{i}"
                d.mkdir(parents=True)
                self.nodes.append(
                    RedisServer(
                        d,
                        free_cluster_port(),
                        **{
                            "cluster-enabled": "yes",
                            "cluster-node-timeout": "2000",
                            "cluster-config-file": str(d / "nodes.conf"),
                            "appendonly": "no",
                            "repl-diskless-sync-delay": "0",
                        },
                    )
                )
            create = [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ]
            done = subprocess.run(create, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
            if done.returncode == 0:
                break
            self.stop()
            if attempt:
                raise AssertionError(
                    f"redis-cli --cluster create failed (status {done.returncode}): {done.stdout[-2000:]}"
                )
            print(f"redis-cli --cluster create failed, trying new ports: {done.stdout[-500:]}")
        self.wait_ok()

    @property
    def url(self) -> str:
        """The URL of the first node that is up (a worker needs one node to find the rest)."""
        live = next(n for n in self.nodes if n.proc is not None and n.proc.poll() is None)
        return f"redis://127.0.0.1:{live.port}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def wait_ok(self, timeout: float = 60) -> None:
        """Until every live node says ``cluster_state:ok`` and knows every slot."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                infos = [self.client(n.port).cluster("info") for n in self.nodes if n.proc and n.proc.poll() is None]
                if (
                    all(i.get("cluster_state") == "ok" and int(i.get("cluster_slots_ok", 0)) == 16384 for i in infos)
                    and self._replicas_online()
                ):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.2)
        raise AssertionError("the Redis Cluster did not reach cluster_state:ok")

    def _replicas_online(self) -> bool:
        """Every live replica has finished its sync (WAIT counts only those)."""
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                info = self.client(n.port).info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
        return True

    def masters(self) -> list[RedisServer]:
        out = []
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                try:
                    if self.client(n.port).info("replication")["role"] == "master":
                        out.append(n)
                except redis.RedisError:
                    pass
        return out

    def stop(self) -> None:
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait(10)


@pytest.fixture
def redis_cluster(tmp_path):
    """A 3-master Redis Cluster of its own (six redis-server processes), stopped at the end."""
    cluster = RedisCluster(tmp_path / "cluster")
    yield cluster
    cluster.stop()
