"""Acceptance: rmax/scrapy-redis's example project, run as a scrapy-redis user runs it.

``tests/fixtures/scrapy_redis_example/`` is scrapy-redis 0.9.1's ``example-project`` (MIT, its
LICENSE beside it) with two changes: the ``dmoz`` spider's host ``dmoz-odp.org`` is the loopback
host ``127.0.0.21`` (port ``8021``, replaced here by the test server's), and its settings list the
add-on, as the README tells a scrapy-redis user to do. Its spiders crawl a loopback copy of a web
directory (``tests/fixtures/scrapy_redis_example_site/``: categories in ``.top-cat``, ``.sub-cat``
and ``.cat-item`` blocks, listed sites in ``.title-and-desc``, category links to another host)
with two ``scrapy crawl`` workers each, on the machine's Redis, and are checked from the outside:
the HTTP servers' access logs, exit statuses, the items in ``crawl.sqlite3`` and in scrapy-redis's
``<spider>:items`` list (its ``RedisPipeline`` stays in the example's settings).

What scrapy-redis 0.9.1 does with this project and site on Scrapy 2.19 (each spider run once by
hand, SCHEDULER scrapy_redis, two workers): ``dmoz`` fetches every category page once (its start
page once per worker: start requests are ``dont_filter``) and each worker closes as soon as the
shared queue is empty; ``myspider_redis`` fetches each pushed URL once, the one outside
``-a domain=`` too, and its workers wait for more until ``MAX_IDLE_TIME_BEFORE_CLOSE``;
``mycrawler_redis`` fetches the pushed URLs only: Scrapy 2.19's OffsiteMiddleware reads
``allowed_domains`` twice, and the ``filter`` the spider's ``__init__`` sets is empty the second
time, so every followed link is filtered as offsite. The issue asks for the crawl the example
means: the pushed URLs and every page reachable within the domain, once each.

Each crawl runs once per test process (module-scoped fixtures), its tests reading its result.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import lxml.html
import pytest
import redis

from tests.conftest import FAST, REDIS_DB, REDIS_HOST, REDIS_PORT, ROOT, Worker, _clean_redis
from tests.oracle import reachable_pages
from tests.servers import HttpServer

#: scrapy-redis's own example project: part of the core run on the oldest Scrapy too (tests/run.sh).
pytestmark = pytest.mark.core

PROJECT = Path(__file__).parent / "fixtures" / "scrapy_redis_example"
SITE = Path(__file__).parent / "fixtures" / "scrapy_redis_example_site"
#: The directory's host, as the fixture's dmoz spider names it (start URL and allowed_domains).
HOST, FIXTURE_PORT = "127.0.0.21", 8021
#: A host outside ``-a domain=``: one URL pushed to myspider_redis is there.
OTHER_HOST = "127.0.0.22"
#: The blocks of a page whose links dmoz's rule follows (its LinkExtractor's restrict_css).
CATEGORY_LINKS = ".top-cat, .sub-cat, .cat-item"
#: Given to every worker with ``-s``. The example's DOWNLOAD_DELAY = 1 would hold the whole crawl
#: to a page a second (the add-on makes it the crawl's DOMAIN_RATE_LIMIT, docs/spiders.md): 5 a
#: second keeps the test short, and leaves the links a page finds queued long enough for the other
#: worker to see them (a lease takes up to a second's worth of a host's sends). REDIS_URL goes in
#: the settings, where scrapy-redis's RedisPipeline reads it too.
SETTINGS = {
    **FAST,
    "REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
    "DOWNLOAD_DELAY": "0",
    "DOMAIN_RATE_LIMIT": "5",
    "FRONTIER_POLL_MAX": "0.2",
}
#: Seconds a worker of a crawl that is done is given to exit by itself before the test stops it
#: with SIGINT (a scrapy-redis dmoz worker exits at once; a RedisSpider waits for more URLs).
GRACE = 3
#: Seconds without a new fetch after which a crawl that has not fetched every expected page is
#: taken as done (a test then says which pages it missed).
QUIET = 3


def expected(start: str, within: str | None = None) -> set[str]:
    """The paths (without the leading slash) of the site's pages reachable from ``start`` by the
    links of the blocks ``within`` selects (every link when None), found by walking the files."""
    return set(reachable_pages(SITE, start, within))


def listed_sites(urls: set[str], origin: str) -> list[tuple[str, str]]:
    """(site title, link) of every listed site (``.title-and-desc``) of the pages at ``urls``,
    read from the files."""
    sites = []
    for url in urls:
        path = SITE / url.removeprefix(origin)
        doc = lxml.html.fromstring((path / "index.html" if path.is_dir() else path).read_bytes())
        for block in doc.cssselect(".title-and-desc"):
            sites.append((block.cssselect(".site-title")[0].text.strip(), block.cssselect("a")[0].get("href")))
    return sorted(sites)


def title_of(path: str) -> str:
    """The ``<title>`` of the site's page at ``path``, read from its file."""
    file = SITE / path
    doc = lxml.html.fromstring((file / "index.html" if file.is_dir() else file).read_bytes())
    return doc.findtext(".//title")


@dataclass
class Crawl:
    """What a crawl of the example project left: its workers (stopped), the directory server's
    and the other host's fetches by path, whether each worker exited by itself."""

    workers: list[Worker]
    site: HttpServer
    other: HttpServer
    project: Path
    exited_alone: list[bool] = field(default_factory=list)
    #: ``<spider>:items`` as the crawl left it (another test's Redis cleaning may come before a
    #: test reads it).
    redis_list: list[bytes] = field(default_factory=list)

    def fetched(self) -> dict[str, int]:
        """Fetches by URL, on both servers."""
        return {
            **{self.site.url + path.lstrip("/"): n for path, n in self.site.fetches().items()},
            **{self.other.url + path.lstrip("/"): n for path, n in self.other.fetches().items()},
        }

    def documents(self, spider: str) -> list[dict]:
        """The spider's items stored in the project's ``crawl.sqlite3``, as JSON documents."""
        db = sqlite3.connect(self.project / "crawl.sqlite3")
        try:
            rows = db.execute("SELECT document FROM items WHERE spider = ? AND item_type = 'dict'", (spider,))
            return [json.loads(document) for (document,) in rows]
        finally:
            db.close()

    def redis_items(self) -> list[dict]:
        """What scrapy-redis's RedisPipeline pushed to ``<spider>:items``."""
        return [json.loads(raw) for raw in self.redis_list]


class ExampleWorker(Worker):
    """``scrapy crawl`` in the copy of the example project, with this repository's package and its
    entry points on the path as ``pip install`` puts them."""

    def __init__(self, project: Path, metadata: Path, spider: str, args: list[str], log: Path) -> None:
        cmd = [sys.executable, "-m", "scrapy", "crawl", spider, *args]
        for k, v in SETTINGS.items():
            cmd += ["-s", f"{k}={v}"]
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MYSQL_URL", "SCRAPY_SETTINGS_MODULE")}
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            cmd,
            cwd=project,
            env={**env, "PYTHONPATH": f"{ROOT}:{metadata}"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture(scope="module")
def example(tmp_path_factory, installed_metadata):
    """``run(spider, args, feed=None, done=set()) -> Crawl``: two workers of a fresh copy of the
    example project, the directory served on :data:`HOST` and a one-page site on
    :data:`OTHER_HOST`; ``feed(client, crawl)`` runs once both workers have joined (``client``:
    the crawl's Redis). Once every page of ``done`` (paths of the site, as :func:`expected` gives
    them) is fetched (at once when empty), or nothing more is for :data:`QUIET` seconds, the
    workers get :data:`GRACE` seconds to exit by themselves, then SIGINT."""
    base = tmp_path_factory.mktemp("example")
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    servers: list[HttpServer] = []
    workers: list[Worker] = []

    def run(spider: str, args: list[str], feed=None, done: set[str] = frozenset()) -> Crawl:
        _clean_redis(client)
        root = base / spider
        project = root / "example-project"
        shutil.copytree(PROJECT, project)
        (root / "other").mkdir()
        (root / "other" / "index.html").write_text("<html><head><title>Elsewhere</title></head><body></body></html>")
        site = HttpServer(SITE, HOST, log=root / "site.log")
        other = HttpServer(root / "other", OTHER_HOST, log=root / "other.log")
        servers.extend((site, other))
        dmoz = project / "example" / "spiders" / "dmoz.py"
        dmoz.write_text(dmoz.read_text().replace(f"{HOST}:{FIXTURE_PORT}", f"{HOST}:{site.port}"))
        crawl = Crawl(
            [ExampleWorker(project, installed_metadata, spider, args, root / f"worker{i}.log") for i in range(2)],
            site,
            other,
            project,
        )
        workers.extend(crawl.workers)
        # the quiet time counts from when both workers are in the crawl, not from their start (a
        # few seconds on a loaded machine)
        for w in crawl.workers:
            w.wait_for("Joined the crawl")
        if feed is not None:
            feed(client, crawl)
        # until the pages are fetched, or nothing more is for QUIET seconds (a crawl that misses some)
        fetched, since = 0, time.monotonic()
        while not {f"/{path}" for path in done} <= set(site.fetches()) and time.monotonic() < since + QUIET:
            if all(w.proc.poll() is not None for w in crawl.workers):
                break
            if len(crawl.fetched()) != fetched:
                fetched, since = len(crawl.fetched()), time.monotonic()
            time.sleep(0.1)
        deadline = time.monotonic() + GRACE
        while time.monotonic() < deadline and any(w.proc.poll() is None for w in crawl.workers):
            time.sleep(0.1)
        crawl.exited_alone = [w.proc.poll() is not None for w in crawl.workers]
        for w in crawl.workers:
            if w.proc.poll() is None:
                w.signal(signal.SIGINT)
        for w in crawl.workers:
            w.wait(30)
        crawl.redis_list = client.lrange(f"{spider}:items", 0, -1)
        return crawl

    yield run
    for w in workers:
        w.stop()
    for server in servers:
        server.stop()
    _clean_redis(client)
    client.close()


def assert_clean(crawl: Crawl) -> None:
    """Every worker exited 0 with no traceback and no ERROR line."""
    for w in crawl.workers:
        assert w.proc.returncode == 0, w.output[-4000:]
        assert "Traceback" not in w.output, w.output[-4000:]
        errors = [line for line in w.output.splitlines() if " ERROR: " in line]
        assert not errors, errors[:5]


def assert_fetched_once(crawl: Crawl, urls: set[str]) -> None:
    fetched = crawl.fetched()
    twice = {url: n for url, n in fetched.items() if n > 1}
    assert not twice, f"fetched more than once: {twice}"
    assert set(fetched) == urls, f"missing: {sorted(urls - set(fetched))}, unexpected: {sorted(set(fetched) - urls)}"


def assert_shared(crawl: Crawl, pages: int) -> None:
    shares = [w.stat("response_received_count") for w in crawl.workers]
    assert all(shares) and sum(shares) == pages, f"pages per worker: {shares}"


# dmoz: a CrawlSpider with start_urls and allowed_domains, rules restricted to category blocks.


@pytest.fixture(scope="module")
def dmoz(example) -> Crawl:
    return example("dmoz", [], done=expected("", CATEGORY_LINKS))


def test_dmoz_fetches_every_category_page_once_and_stores_its_sites(dmoz):
    """Every category page once across the two workers (the start page too: once per crawl,
    where scrapy-redis fetches it once per worker), none of the other host's categories
    (allowed_domains), nor the about page (outside the rule's blocks); each listed site of a
    category page is an item, in crawl.sqlite3 and in scrapy-redis's dmoz:items."""
    pages = {dmoz.site.url + path for path in expected("", CATEGORY_LINKS)}
    assert len(pages) == 29
    assert_fetched_once(dmoz, pages)
    assert_shared(dmoz, len(pages))
    sites = listed_sites(pages, dmoz.site.url)
    assert len(sites) == 40
    stored = dmoz.documents("dmoz")
    assert sorted((d["name"], d["link"]) for d in stored) == sites
    assert all(d["spider"] == "dmoz" and d["crawled"] and d["description"].startswith("A listed site") for d in stored)
    assert sorted((d["name"], d["link"]) for d in dmoz.redis_items()) == sites


def test_dmoz_workers_exit_by_themselves_when_the_crawl_runs_dry(dmoz):
    assert_clean(dmoz)
    assert dmoz.exited_alone == [True, True]


# myspider_redis: a RedisSpider fed through myspider:start_urls, allowed_domains from -a domain=.

#: Pushed to myspider:start_urls: pages of the directory (paths), and the other host's page.
MYSPIDER_PAGES = ("Arts/", "Business/Energy/", "Science/Physics/Optics/", "about.html")


@pytest.fixture(scope="module")
def myspider(example) -> Crawl:
    """Workers started with MAX_IDLE_TIME_BEFORE_CLOSE=2 (the example leaves it at 0: wait for
    more URLs forever), which scrapy-redis's RedisSpider honours too."""

    def feed(client: redis.Redis, crawl: Crawl) -> None:
        client.lpush("myspider:start_urls", *[crawl.site.url + p for p in MYSPIDER_PAGES], crawl.other.url)

    return example(
        "myspider_redis",
        ["-a", f"domain={HOST}", "-s", "MAX_IDLE_TIME_BEFORE_CLOSE=2"],
        feed=feed,
        done=set(MYSPIDER_PAGES),
    )


def test_myspider_workers_exit_after_max_idle_time(myspider):
    assert_clean(myspider)
    assert myspider.exited_alone == [True, True]


def test_myspider_fetches_each_pushed_url_of_its_domain_once(myspider):
    """Each pushed URL of the directory is fetched once by one of the workers and is one item
    (its title and URL), stored and in myspider_redis:items."""
    urls = {myspider.site.url + p for p in MYSPIDER_PAGES}
    site_fetches = {url: n for url, n in myspider.fetched().items() if url.startswith(myspider.site.url)}
    assert site_fetches == dict.fromkeys(urls, 1)
    titles = {url: title_of(url.removeprefix(myspider.site.url)) for url in urls}
    stored = {d["url"]: d["name"] for d in myspider.documents("myspider_redis")}
    assert {u: stored.get(u) for u in urls} == titles
    assert {d["url"]: d["name"] for d in myspider.redis_items() if d["url"] in urls} == titles


def test_myspider_fetches_a_pushed_url_outside_its_domain(myspider):
    """scrapy-redis's pushed requests are dont_filter: allowed_domains does not apply to them."""
    assert myspider.fetched().get(myspider.other.url) == 1
    stored = {d["url"]: d["name"] for d in myspider.documents("myspider_redis")}
    assert stored.get(myspider.other.url) == "Elsewhere"
    assert len(myspider.documents("myspider_redis")) == len(MYSPIDER_PAGES) + 1


# mycrawler_redis: a RedisCrawlSpider fed through mycrawler:start_urls, following every link of
# the domain given with -a domain=.

#: Pushed to mycrawler:start_urls (paths of the directory).
MYCRAWLER_PAGES = ("Arts/", "Science/Physics/")


@pytest.fixture(scope="module")
def mycrawler(example) -> Crawl:
    """The example as shipped: MAX_IDLE_TIME_BEFORE_CLOSE unset, workers wait for more URLs
    until stopped."""

    def feed(client: redis.Redis, crawl: Crawl) -> None:
        client.lpush("mycrawler:start_urls", *[crawl.site.url + p for p in MYCRAWLER_PAGES])

    pages = set().union(*(expected(p) for p in MYCRAWLER_PAGES))
    return example("mycrawler_redis", ["-a", f"domain={HOST}"], feed=feed, done=pages)


def test_mycrawler_workers_wait_for_more_urls_until_stopped(mycrawler):
    """Both workers still run once the crawl is done, and SIGINT stops them cleanly."""
    assert mycrawler.exited_alone == [False, False]
    assert_clean(mycrawler)


def test_mycrawler_fetches_every_page_of_its_domain_once(mycrawler):
    """The pushed URLs and every page reachable from them within the domain, once each across the
    two workers, none of the other hosts' links; every page the rule reached is an item (its
    title and URL; a pushed URL's response goes to CrawlSpider's parse_start_url, which yields
    none), stored and in mycrawler_redis:items."""
    pages = {mycrawler.site.url + p for p in set().union(*(expected(p) for p in MYCRAWLER_PAGES))}
    assert len(pages) == 30
    assert_fetched_once(mycrawler, pages)
    assert_shared(mycrawler, len(pages))
    reached = {url: title_of(url.removeprefix(mycrawler.site.url)) for url in pages}
    for pushed in MYCRAWLER_PAGES:
        del reached[mycrawler.site.url + pushed]
    assert {d["url"]: d["name"] for d in mycrawler.documents("mycrawler_redis")} == reached
    assert {d["url"]: d["name"] for d in mycrawler.redis_items()} == reached
