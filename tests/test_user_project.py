"""Acceptance: any Scrapy spider, distributed.

A project made by ``scrapy startproject``, in a venv of its own where this repository is
``pip install``-ed (with scrapy-redis 0.9.1 for its scrapy-redis spider), switches to distributed
mode by listing the add-on in its settings and nothing else; ``REDIS_URL`` and ``MYSQL_URL`` come
from the environment. Its spiders (``tests/fixtures/user_project/``) are written as a Scrapy or
scrapy-redis user writes them. Each crawl is two ``scrapy crawl`` processes of that venv at once,
against the machine's Redis and MariaDB and an HTTP server on loopback, and is checked from the
outside: the server's access log (every page fetched once across the workers), exit status, log
lines, stats, Redis keys and the rows in MySQL.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pymysql
import pytest

from tests.conftest import FAST, ROOT, Worker

#: Whole crawls with servers stopped, killed or installed: minutes (pytest -m "not slow" skips them).
pytestmark = pytest.mark.slow

SPIDERS_DIR = Path(__file__).parent / "fixtures" / "user_project"
#: The user's project package; anything but ``crawler``, this repository's own project.
PROJECT = "shop"
ADDONS = 'ADDONS = {"scrapy_frontier.addon.DistributedAddon": 0}'
#: What ``pip install <repository>`` must bring along (pyproject's dependencies), by import name.
RUNTIME_IMPORTS = (
    "scrapy",
    "redis",
    "pymysql",
    "itemadapter",
    "pythonjsonlogger",
    "prometheus_client",
    "scrapy_frontier",
    "scrapy_redis",
)
#: Variables of this test run that a user's worker would not have.
FOREIGN_ENV = (
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "SCRAPY_SETTINGS_MODULE",
    "SCRAPY_PROJECT",
    "REDIS_URL",
    "MYSQL_URL",
)
#: Given to every crawl with ``-s``: workers exit soon after the crawl is done (a whole number of
#: seconds: scrapy-redis reads it with ``int()``); in place of the generated settings' one request
#: at a time and one a second (DOWNLOAD_DELAY = 1, CONCURRENT_REQUESTS_PER_DOMAIN = 1, which hold
#: for the whole crawl), eight at a time and ten a second, each worker taking two requests at a
#: time (a lease books up to a second's worth of a host's sends: ten) and polling every 0.2s when
#: idle, so that both workers take pages of the small site.
CRAWL_SETTINGS = {
    **FAST,
    "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
    "DOWNLOAD_DELAY": "0",
    "CONCURRENT_REQUESTS_PER_DOMAIN": "8",
    "DOMAIN_RATE_LIMIT": "10",
    "FRONTIER_PREFETCH": "2",
    "FRONTIER_POLL_MAX": "0.2",
}


def user_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    return {**env, **extra}


@dataclass(frozen=True)
class UserProject:
    root: Path  # the directory with scrapy.cfg
    python: Path  # the venv's interpreter


@pytest.fixture(scope="module")
def user_project(tmp_path_factory) -> UserProject:
    """``scrapy startproject shop`` in a fresh venv where ``pip install <repository root>`` and
    ``pip install scrapy-redis==0.9.1`` ran (pip reaches its index through the machine's own
    configuration, with its cache); its settings.py gains the ``ADDONS`` line only."""
    base = tmp_path_factory.mktemp("user")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=user_env())
    python = venv / "bin" / "python"
    pip = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(ROOT),
            "scrapy-redis==0.9.1",
        ],
        check=False,
        cwd=base,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, f"pip install failed:\n{pip.stdout[-3000:]}\n{pip.stderr[-3000:]}"
    probe = (
        "import importlib, importlib.util, json, sys\n"
        "failed = {}\n"
        f"for name in {RUNTIME_IMPORTS!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed[name] = f'{type(exc).__name__}: {exc}'\n"
        "print(json.dumps({'failed': failed, 'crawler': importlib.util.find_spec('crawler') is not None}))\n"
    )
    found = subprocess.run(
        [str(python), "-c", probe], check=False, cwd=base, env=user_env(), capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert result["failed"] == {}, f"the installed package does not bring its runtime dependencies: {result['failed']}"
    assert result["crawler"] is False, (
        "pip install ships this repository's own Scrapy project (a package named crawler)"
    )

    made = subprocess.run(
        [str(python), "-m", "scrapy", "startproject", PROJECT],
        check=False,
        cwd=base,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    root = base / PROJECT
    settings = root / PROJECT / "settings.py"
    text, count = re.subn(r"(?m)^ADDONS = \{\}$", ADDONS, settings.read_text())
    settings.write_text(text if count == 1 else f"{text}\n{ADDONS}\n")
    for spider in SPIDERS_DIR.glob("*.py"):
        shutil.copy(spider, root / PROJECT / "spiders" / spider.name)
    return UserProject(root, python)


class UserWorker(Worker):
    """``scrapy crawl`` in the user's project with its venv's python (conftest's :class:`Worker`
    runs this repository's project)."""

    def __init__(
        self,
        project: UserProject,
        spider: str,
        settings: dict[str, str],
        env: dict[str, str],
        args: list[str],
        log: Path,
    ) -> None:
        cmd = [str(project.python), "-m", "scrapy", "crawl", spider]
        for k, v in {**CRAWL_SETTINGS, **settings}.items():
            cmd += ["-s", f"{k}={v}"]
        cmd += args
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            cmd, cwd=project.root, env=user_env(**env), stdout=self._log, stderr=subprocess.STDOUT
        )


@pytest.fixture
def crawl(user_project, tmp_path, redis_url, mysql_url):
    """``crawl(spider, n=2, settings=None, args=()) -> workers``: ``n`` workers of the user's
    project started at once, ``REDIS_URL`` and ``MYSQL_URL`` in their environment."""
    workers: list[UserWorker] = []

    def start(
        spider: str, n: int = 2, settings: dict[str, str] | None = None, args: tuple[str, ...] = ()
    ) -> list[UserWorker]:
        env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
        new = [
            UserWorker(
                user_project,
                spider,
                {"DEAD_LETTER_DIR": str(tmp_path), **(settings or {})},
                env,
                list(args),
                tmp_path / f"{spider}-{len(workers) + i}.log",
            )
            for i in range(n)
        ]
        workers.extend(new)
        return new

    yield start
    for w in workers:
        w.stop()


def finish(workers: list[UserWorker], expected_errors: str = "") -> None:
    """Every worker exits 0 and logged no traceback, and no error but those ``expected_errors``
    (a regular expression) matches."""
    for w in workers:
        assert w.wait(120) == 0, w.output[-4000:]
    for w in workers:
        assert "Traceback" not in w.output, w.output[-4000:]
        errors = [
            line
            for line in w.output.splitlines()
            if " ERROR: " in line and not (expected_errors and re.search(expected_errors, line))
        ]
        assert not errors, errors[:5]


def paths(urls) -> list[str]:
    return [urlsplit(u).path for u in urls]


def assert_fetched_once(server, urls, also: tuple[str, ...] = ("/robots.txt",), start: str | None = None) -> None:
    """The server was asked for each of ``urls`` (and ``also``) exactly once, and for nothing else;
    ``start``, the path of the spider's own start page, twice: once as the crawl's start request,
    once as a link to it, as plain Scrapy fetches it."""
    fetched = server.fetches()
    if start is not None:
        assert fetched.get(start) == 2, fetched
        fetched = {**fetched, start: 1}
    twice = {p: n for p, n in fetched.items() if n > 1}
    assert not twice, f"fetched more than once: {twice}"
    assert set(fetched) == set(paths(urls)) | set(also)


def items_scraped(workers: list[UserWorker]) -> list[int]:
    return [w.stat("item_scraped_count") for w in workers]


def assert_shared(workers: list[UserWorker], pages: int) -> None:
    """Both workers crawled, ``pages`` pages between them."""
    shares = [w.stat("response_received_count") for w in workers]
    assert all(shares) and sum(shares) == pages, f"pages per worker: {shares}"


def stored_documents(mysql_query, spider: str) -> list[dict]:
    """The spider's dict items in MySQL: JSON documents in the ``items`` table (items without a
    schema, docs/items.md)."""
    try:
        rows = mysql_query("SELECT document FROM items WHERE spider = %s AND item_type = 'dict'", spider)
    except pymysql.err.ProgrammingError as exc:
        pytest.fail(
            f"no dict item of {spider!r} in MySQL ({exc}); dict items need the storage that writes items without a "
            "schema"
        )
    return [json.loads(document) for (document,) in rows]


def assert_stored(mysql_query, spider: str, urls) -> None:
    stored = [d["url"] for d in stored_documents(mysql_query, spider)]
    assert sorted(stored) == sorted(urls)


def test_redis_crawl_spider_with_rules(tutorial_site, crawl, redis_client, mysql_query):
    """scrapy-redis's RedisCrawlSpider: a custom ``redis_key`` fed with LPUSH, ``redis_batch_size``
    (2, of 3 start URLs), rules with a callback by name, ``cb_kwargs`` and ``follow=True``. Two of
    the start URLs are also links of the first page: each page is fetched once all the same."""
    server, expected = tutorial_site
    start = server.url + "tutorial/index.html"
    workers = crawl("user_redis")
    for w in workers:
        w.wait_for("Joined the crawl")
    redis_client.lpush(
        "user_redis:seeds", start, server.url + "tutorial/appetite.html", server.url + "tutorial/venv.html"
    )
    finish(workers)
    assert_fetched_once(server, expected)
    for w in workers:
        assert "start URLs come from user_redis:seeds through the frontier" in w.output
    assert sum(w.stat("start_urls/accepted") for w in workers) == 3
    assert_shared(workers, len(expected) + 1)  # and robots.txt
    assert sum(items_scraped(workers)) == len(expected), items_scraped(workers)
    assert not redis_client.exists("user_redis:seeds")
    documents = stored_documents(mysql_query, "user_redis")
    assert sorted(d["url"] for d in documents) == sorted(expected)
    sections = {d["url"]: d["section"] for d in documents}
    assert sections[start] == "start" and set(sections.values()) == {"start", "tutorial"}


def test_plain_spider_with_start_urls(tutorial_site, crawl, mysql_query):
    """A ``scrapy.Spider`` whose ``start_urls`` every worker reads: the start page is fetched once
    per crawl as a start request, and once more as a link to it, as plain Scrapy fetches it."""
    server, expected = tutorial_site
    start = server.url + "tutorial/index.html"
    # 4 pages a second: the crawl outlasts a second worker that starts a second or two late on
    # a loaded machine (at 10/s, the first had taken all 19 in 2 s once in three full runs)
    workers = crawl("user_pages", settings={"DOMAIN_RATE_LIMIT": "4"}, args=("-a", f"start_url={start}"))
    finish(workers)
    assert_fetched_once(server, expected, start="/tutorial/index.html")
    assert_shared(workers, len(expected) + 2)
    # the start page's item twice (its two fetches), stored once
    assert sum(items_scraped(workers)) == len(expected) + 1, items_scraped(workers)
    assert_stored(mysql_query, "user_pages", expected)


def test_sitemap_spider_with_gzipped_sitemap(tutorial_site, tmp_path, crawl, mysql_query):
    """A ``SitemapSpider`` over a sitemap index pointing to two sitemaps, one gzipped."""
    server, expected = tutorial_site
    pages = sorted(expected)
    half = len(pages) // 2
    root = tmp_path / "tutorial-site"

    def urlset(urls) -> bytes:
        entries = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
        return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>\n'.encode()

    (root / "sitemap-a.xml").write_bytes(urlset(pages[:half]))
    (root / "sitemap-b.xml.gz").write_bytes(gzip.compress(urlset(pages[half:])))
    index = "".join(
        f"<sitemap><loc>{server.url}{name}</loc></sitemap>" for name in ("sitemap-a.xml", "sitemap-b.xml.gz")
    )
    (root / "sitemap-index.xml").write_text(
        f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{index}</sitemapindex>\n'
    )
    workers = crawl("user_sitemap", args=("-a", f"sitemap={server.url}sitemap-index.xml"))
    finish(workers)
    assert_fetched_once(
        server, expected, also=("/robots.txt", "/sitemap-index.xml", "/sitemap-a.xml", "/sitemap-b.xml.gz")
    )
    assert_shared(workers, len(expected) + 4)
    assert sum(items_scraped(workers)) == len(expected), items_scraped(workers)
    assert_stored(mysql_query, "user_sitemap", expected)


def test_requests_redis_cannot_hold_are_refused_and_the_crawl_goes_on(tutorial_site, crawl, mysql_query):
    """A lambda callback and a ``meta`` value that is not JSON: each request is refused when
    queued, with one log line naming the spider, the URL and the key, and a stat."""
    server, _ = tutorial_site
    base = server.url + "tutorial/"
    (worker,) = crawl("user_bad", n=1, args=("-a", f"start_url={base}index.html"))
    finish([worker], expected_errors="Refused request")
    assert_fetched_once(server, [base + "index.html", base + "appetite.html"])
    refused = [line for line in worker.output.splitlines() if "Refused request" in line]
    assert len(refused) == 2, refused
    (callback,) = [line for line in refused if f"{base}introduction.html" in line]
    assert "'user_bad'" in callback and "callback" in callback and "<lambda>" in callback
    (meta,) = [line for line in refused if f"{base}controlflow.html" in line]
    assert "'user_bad'" in meta and "meta key 'handle'" in meta
    assert worker.stat("frontier/refused/callback") == 1
    assert worker.stat("frontier/refused/not_json") == 1
    assert worker.stat("item_scraped_count") == 2
    assert_stored(mysql_query, "user_bad", [base + "index.html", base + "appetite.html"])


def test_two_crawl_ids_share_one_redis(tutorial_site, crawl, redis_client, mysql_query):
    """Two crawls of one spider, ``CRAWL_ID=one`` and ``CRAWL_ID=two``, at once: each has its own
    keys (``user_pages@<crawl id>:...``) and fetches every page once."""
    server, expected = tutorial_site
    start = server.url + "tutorial/index.html"
    workers = [
        w
        for crawl_id in ("one", "two")
        for w in crawl(
            "user_pages",
            n=1,
            settings={"CRAWL_ID": crawl_id, "SCHEDULER_PERSIST": "True"},
            args=("-a", f"start_url={start}"),
        )
    ]
    finish(workers)
    fetched = server.fetches()
    # each crawl fetches every page once, its start page twice (a start request, then a link to it)
    assert fetched == {p: 4 if p == "/tutorial/index.html" else 2 for p in paths(expected) + ["/robots.txt"]}
    assert items_scraped(workers) == [len(expected) + 1, len(expected) + 1]
    keys = sorted(k.decode() for k in redis_client.scan_iter(match="*user_pages*", count=1000))
    assert keys and all(k.startswith(("user_pages@one:", "user_pages@two:")) for k in keys), keys
    for crawl_id in ("one", "two"):
        assert int(redis_client.get(f"user_pages@{crawl_id}:dupefilter:count") or 0) >= len(expected), (
            keys
        )  # packed, persisted
    assert_stored(mysql_query, "user_pages", expected)


def test_a_bad_crawl_id_stops_the_crawl_at_start(tutorial_site, crawl, redis_client):
    server, _ = tutorial_site
    (worker,) = crawl(
        "user_pages", n=1, settings={"CRAWL_ID": "a:b"}, args=("-a", f"start_url={server.url}tutorial/index.html")
    )
    assert worker.wait(120) == 1, worker.output[-4000:]
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "CRAWL_ID='a:b'" in errors[0], errors
    assert "Traceback" not in worker.output
    assert server.fetches() == {}
    assert not list(redis_client.scan_iter(match="*user_pages*", count=1000))
