"""The Scrapy a user already has (every Scrapy from 2.11 to 2.19): the declared range, pip keeping
the installed Scrapy, Scrapy's own commands untouched, spiders of the pre-2.13 kind crawling, the
same items as plain Scrapy, commands that build the spider with its ``-a`` arguments.

``tests/run.sh`` runs the tests marked ``core`` on the oldest supported Scrapy too;
``tests/run.sh --scrapy-matrix`` on every minor (docs/spiders.md, "Your Scrapy stays")."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest
import scrapy
from packaging.requirements import Requirement

from tests.conftest import ROOT, scrapy_command

pytestmark = pytest.mark.core

SPIDERS = {"SPIDER_MODULES": "tests.spiders", "MAX_IDLE_TIME_BEFORE_CLOSE": "3"}


def test_the_declared_scrapy_range_is_the_tested_one():
    """pyproject.toml admits exactly the minors the matrix runs: 2.11 to 2.19."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [Requirement(d).specifier for d in project["dependencies"] if Requirement(d).name.lower() == "scrapy"]
    assert {"2.11.2", "2.13.4", "2.19.0", scrapy.__version__} <= set(
        spec.filter(["2.11.2", "2.13.4", "2.19.0", scrapy.__version__])
    )
    assert not list(spec.filter(["2.10.1", "2.20.0", "3.0.0"]))


def test_pip_install_of_the_project_keeps_the_installed_scrapy(tmp_path):
    """What ``pip install`` of this project would change in this environment: not Scrapy."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    installs = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert "scrapy" not in installs, installs
    assert "twisted" not in installs and "w3lib" not in installs, installs


def test_every_module_imports_and_scrapys_commands_run(installed_metadata):
    """Every module of the package imports on this Scrapy, and with the package's entry points
    ``scrapy version`` and ``scrapy runspider -h`` work (a command that fails to import would fail them all)."""
    import scrapy_frontier

    for module in pkgutil.walk_packages(scrapy_frontier.__path__, "scrapy_frontier."):
        importlib.import_module(module.name)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{installed_metadata}"}
    for command in (["version"], ["runspider", "-h"], ["status", "-h"], ["push", "-h"]):
        done = subprocess.run(
            [sys.executable, "-m", "scrapy", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, (command, done.stderr[-2000:])
    assert (
        scrapy.__version__
        in subprocess.run(
            [sys.executable, "-m", "scrapy", "version"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        ).stdout
    )


def feed_urls(*paths: Path) -> Counter[str]:
    """How many items of each URL the feed files hold."""
    return Counter(json.loads(line)["url"] for path in paths for line in path.read_text().splitlines())


def two_workers(start_worker, spider: str, url: str, redis_url: str, tmp_path: Path) -> tuple[list, list[Path]]:
    """Two workers of ``spider`` from ``-a url=``, over Redis, each writing its items to a feed
    file; returns them once both have exited 0, with their feed files."""
    feeds = [tmp_path / f"w{i}.jl" for i in range(2)]
    workers = [
        start_worker(
            spider, settings=SPIDERS, env={"REDIS_URL": redis_url}, args=["-a", f"url={url}", "-O", f"{feed}:jsonlines"]
        )
        for feed in feeds
    ]
    for worker in workers:
        assert worker.wait() == 0, worker.output[-3000:]
    return workers, feeds


@pytest.mark.slow
def test_a_start_requests_spider_crawls_the_docs_with_two_workers(
    docs_site, expected_pages, start_worker, redis_url, tmp_path
):
    """A spider with ``start_requests()`` and no ``start()``, and a middleware with only
    ``process_start_requests()``: two workers crawl every page, each once, and exit by themselves."""
    workers, feeds = two_workers(start_worker, "legacy", f"{docs_site.url}index.html", redis_url, tmp_path)
    urls = feed_urls(*feeds)
    assert set(urls) == expected_pages
    assert max(urls.values()) == 1, [url for url, n in urls.items() if n > 1]
    tagged = [json.loads(line) for feed in feeds for line in feed.read_text().splitlines()]
    assert [item["url"] for item in tagged if item["tagged"]] == [f"{docs_site.url}index.html"]
    said = "defines start_requests() and no start(): Scrapy"
    if hasattr(scrapy.Spider, "start_requests"):  # Scrapy < 2.16 calls it itself
        assert not any(said in worker.output for worker in workers)
    else:
        assert all(said in worker.output for worker in workers)
    for worker in workers:
        assert "Traceback" not in worker.output and " ERROR: " not in worker.output


@pytest.mark.slow
def test_a_crawlspider_gives_the_items_of_plain_scrapy(docs_site, start_worker, redis_url, tmp_path):
    """A CrawlSpider whose start page its rule reaches again: two workers store the items that
    Scrapy's own scheduler and dupefilter give (the start page's own item included)."""
    start = f"{docs_site.url}tutorial/index.html"
    plain = tmp_path / "plain.jl"
    worker = start_worker(
        "rules",
        settings={**SPIDERS, "SQLITE_PATH": str(tmp_path / "plain.sqlite3")},
        env={},
        args=["-a", f"url={start}", "-O", f"{plain}:jsonlines"],
    )
    assert worker.wait() == 0, worker.output[-3000:]
    expected = set(feed_urls(plain))
    assert start in expected
    _, feeds = two_workers(start_worker, "rules", start, redis_url, tmp_path)
    assert set(feed_urls(*feeds)) == expected


def test_commands_build_the_spider_with_its_arguments(redis_url, redis_client):
    """A RedisSpider's redis_key set in ``__init__`` from ``-a key=``: push writes to it and
    status reads it."""
    env = {"REDIS_URL": redis_url, "SPIDER_MODULES": "tests.spiders"}
    args = ["-s", "SPIDER_MODULES=tests.spiders", "-a", "key=compat_redis:seeds"]
    done = scrapy_command(["push", "compat_redis", *args, "http://127.0.0.9/a", "http://127.0.0.9/b"], env)
    assert done.returncode == 0, done.stderr
    assert redis_client.llen("compat_redis:seeds") == 2 and not redis_client.exists("compat_redis:start_urls")
    done = scrapy_command(["status", "compat_redis", *args, "--json"], env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["frontier"]["start_urls_waiting"] == 2
    done = scrapy_command(["status", "compat_redis", "-s", "SPIDER_MODULES=tests.spiders", "-a", "bad"], env)
    assert done.returncode == 2 and "NAME=VALUE" in done.stderr
