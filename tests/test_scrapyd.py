"""Deploying to scrapyd: a real ``scrapyd`` on loopback, the project deployed to it with
``scrapyd-deploy`` (an egg built by setup.py), two ``site`` jobs started through
``schedule.json`` that share one distributed crawl through Redis and store in MariaDB."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path
from urllib.parse import urlencode
from urllib.request import urlopen

import pymysql
import pytest

from tests.conftest import FAST, ROOT
from tests.loopback import free_port, wait_port
from tests.oracle import reachable_pages
from tests.servers import DOCS, HttpServer

#: What scrapyd-deploy needs to build the egg: the project, the library, setup.py (with
#: pyproject.toml and the README it names) and scrapy.cfg.
PROJECT_FILES = ("crawler", "scrapy_frontier", "setup.py", "pyproject.toml", "README.md", "scrapy.cfg")
#: A small part of the docs (17 pages reachable from its index) served as a site of its own.
SUBTREE = "tutorial"
#: Variables the jobs must get only from schedule.json's settings, never from the test's environment.
LEAKY_ENV = ("REDIS_URL", "MYSQL_URL", "PYTHONPATH", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "METRICS_PORT")


class Scrapyd:
    """``python -m scrapyd`` run in ``directory`` (which holds its scrapyd.conf), on 127.0.0.1."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.port = free_port()
        (directory / "scrapyd.conf").write_text(
            "[scrapyd]\n"
            "bind_address = 127.0.0.1\n"
            f"http_port = {self.port}\n"
            f"eggs_dir = {directory / 'eggs'}\n"
            f"logs_dir = {directory / 'logs'}\n"
            f"items_dir = {directory / 'items'}\n"
            f"dbs_dir = {directory / 'dbs'}\n"
            "max_proc = 2\n"
            "poll_interval = 0.2\n"
        )
        self.log = directory / "scrapyd.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scrapyd", "--pidfile="],
            cwd=directory,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            wait_port("127.0.0.1", self.port, timeout=30)
        except RuntimeError:
            self.stop()
            raise AssertionError(f"scrapyd did not start:\n{self.log.read_text(errors='replace')[-3000:]}") from None
        self.url = f"http://127.0.0.1:{self.port}/"

    def api(self, endpoint: str, params: list[tuple[str, str]] | None = None, *, post: bool = False) -> dict:
        """GET (or POST, form-encoded) a scrapyd JSON endpoint; returns the decoded answer."""
        query = urlencode(params or [])
        if post:
            with urlopen(self.url + endpoint, data=query.encode(), timeout=30) as resp:
                return json.load(resp)
        with urlopen(self.url + endpoint + ("?" + query if query else ""), timeout=30) as resp:
            return json.load(resp)

    def job_log(self, job: str) -> str:
        path = self.directory / "logs" / "crawler" / "site" / f"{job}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        # Jobs still running (a failed test): end them by their pid before scrapyd itself.
        try:
            for job in self.api("listjobs.json")["running"]:
                if job.get("pid"):
                    os.kill(job["pid"], 9)
        except (OSError, ValueError):
            pass
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in LEAKY_ENV}


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def scrapyd(tmp_path):
    directory = tmp_path / "scrapyd"
    directory.mkdir()
    server = Scrapyd(directory, clean_env())
    yield server
    server.stop()


@pytest.fixture
def small_site(tmp_path):
    """The docs' ``tutorial/`` directory alone on a server of its own; links out of it are 404s."""
    root = tmp_path / "site"
    shutil.copytree(DOCS / SUBTREE, root / SUBTREE)
    server = HttpServer(root, "127.0.0.3")
    yield server, {server.url + p for p in reachable_pages(root, f"{SUBTREE}/index.html")}
    server.stop()


def copy_project(project_copy: Path) -> None:
    project_copy.mkdir()
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, project_copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, project_copy / name)


def deploy(project_copy: Path, scrapyd_url: str, version: str = "1") -> dict:
    """Copy the project, point its scrapy.cfg deploy target at ``scrapyd_url`` and run scrapyd-deploy."""
    copy_project(project_copy)
    cfg = configparser.ConfigParser()
    cfg.read(project_copy / "scrapy.cfg")
    # The repository's target, as documented in README.md.
    assert dict(cfg["deploy"]) == {"url": "http://127.0.0.1:6800/", "project": "crawler"}
    assert cfg["settings"]["default"] == "crawler.settings"
    cfg["deploy"]["url"] = scrapyd_url
    with (project_copy / "scrapy.cfg").open("w") as f:
        cfg.write(f)
    done = subprocess.run(
        [sys.executable, "-m", "scrapyd_client.deploy", "--version", version],
        cwd=project_copy,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_scrapyd_deploy_and_two_scheduled_jobs_share_one_crawl(
    scrapyd, small_site, tmp_path, redis_url, redis_client, mysql_url, mysql_query
):
    site, expected = small_site
    assert len(expected) == 17

    answer = deploy(tmp_path / "project", scrapyd.url)
    assert (answer["status"], answer["project"], answer["spiders"]) == ("ok", "crawler", 2), answer
    # The egg holds every module the jobs import (and no data files are read from next to them).
    egg = scrapyd.directory / "eggs" / "crawler" / "1.egg"
    with zipfile.ZipFile(egg) as z:
        names = set(z.namelist())
    sources = {
        p.relative_to(ROOT).as_posix()
        for package in ("crawler", "scrapy_frontier")
        for p in (ROOT / package).rglob("*.py")
    }
    sources |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "scrapy_frontier" / "lua").rglob("*.lua")}
    assert sources <= names, sorted(sources - names)
    # ... and the jobs can get them from nowhere else: scrapyd's directory and environment lack them.
    for package in ("crawler", "scrapy_frontier"):
        probe = subprocess.run(
            [sys.executable, "-c", f"import {package}"],
            cwd=scrapyd.directory,
            env=clean_env(),
            capture_output=True,
            text=True,
        )
        assert probe.returncode != 0 and f"No module named '{package}'" in probe.stderr
    # scrapyd runs the egg to list its spiders.
    assert scrapyd.api("listspiders.json", [("project", "crawler")])["spiders"] == ["modules", "site"]

    settings = {
        **FAST,
        "REDIS_URL": redis_url,
        "MYSQL_URL": mysql_url,
        "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
        # small batches, so that both jobs get a share of 17 pages: the job that did not take the
        # start URL looks again within 0.1 s, and one job alone takes over a second for them
        "FRONTIER_PREFETCH": "2",
        "CONCURRENT_REQUESTS": "2",
        "FRONTIER_POLL_MAX": "0.1",
        "DOWNLOAD_DELAY": "0.1",
        "METRICS_PORT": "0",
        "DEAD_LETTER_DIR": str(tmp_path),
    }
    jobs = []
    for _ in range(2):
        job = uuid.uuid4().hex
        params = [("project", "crawler"), ("spider", "site"), ("jobid", job)]
        params += [("setting", f"{k}={v}") for k, v in settings.items()]
        assert scrapyd.api("schedule.json", params, post=True) == {
            "node_name": answer["node_name"],
            "status": "ok",
            "jobid": job,
        }
        jobs.append(job)

    wait_until(lambda: all("Joined the crawl" in scrapyd.job_log(j) for j in jobs), 60, "both jobs to join the crawl")
    running = scrapyd.api("listjobs.json", [("project", "crawler")])["running"]
    assert sorted(j["id"] for j in running) == sorted(jobs)
    redis_client.lpush("site:start_urls", f"{site.url}{SUBTREE}/index.html")

    def finished():
        listing = scrapyd.api("listjobs.json", [("project", "crawler")])
        return listing if not listing["pending"] and not listing["running"] else None

    listing = wait_until(finished, 90, "both jobs to finish")
    assert sorted(j["id"] for j in listing["finished"]) == sorted(jobs)
    assert {(j["project"], j["spider"]) for j in listing["finished"]} == {("crawler", "site")}

    scrapyd_log = scrapyd.log.read_text(errors="replace")
    for job in jobs:
        assert re.search(rf"Process finished: project='crawler' spider='site' job='{job}'", scrapyd_log), scrapyd_log[
            -3000:
        ]
        log = scrapyd.job_log(job)
        assert "'finish_reason': 'finished'" in log, log[-3000:]
        assert "Storing items in MySQL" in log
        assert "Traceback" not in log, log[-3000:]
    assert "Process died" not in scrapyd_log

    try:
        urls = [row[0] for row in mysql_query("SELECT url FROM pages")]
    except pymysql.err.ProgrammingError:  # no job created the table
        urls = []
    assert len(urls) == len(set(urls)), "a page was stored twice"
    assert set(urls) == expected
    shares = [
        int(m.group(1)) for j in jobs for m in [re.search(r"'item_scraped_count': (\d+)", scrapyd.job_log(j))] if m
    ]
    assert len(shares) == 2 and all(shares) and sum(shares) == len(expected), shares


def test_the_images_prebuilt_egg_is_served_and_a_later_deploy_wins(tmp_path):
    """What deploy/Dockerfile does: ``scrapyd-deploy --build-egg <eggs_dir>/crawler/0.egg`` before
    scrapyd starts; scrapyd then knows the project without any upload, and a later
    scrapyd-deploy (version = a timestamp) becomes the version jobs run."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    egg_path = re.search(r"scrapyd-deploy --build-egg (\S+)", dockerfile).group(1)
    assert egg_path.endswith("/crawler/0.egg")
    directory = tmp_path / "scrapyd"
    (directory / "eggs" / "crawler").mkdir(parents=True)
    copy_project(tmp_path / "build")
    done = subprocess.run(
        [sys.executable, "-m", "scrapyd_client.deploy", "--build-egg", str(directory / "eggs" / "crawler" / "0.egg")],
        cwd=tmp_path / "build",
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    server = Scrapyd(directory, clean_env())
    try:
        assert server.api("listprojects.json")["projects"] == ["crawler"]
        assert server.api("listspiders.json", [("project", "crawler")])["spiders"] == ["modules", "site"]
        later = str(int(time.time()))
        assert deploy(tmp_path / "project", server.url, version=later)["status"] == "ok"
        assert server.api("listversions.json", [("project", "crawler")])["versions"] == ["0", later]
    finally:
        server.stop()
