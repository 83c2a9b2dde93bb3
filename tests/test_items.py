"""Items of every kind ItemAdapter supports (scrapy Item, dict, dataclass, attrs) stored by real
``scrapy crawl`` and ``scrapy replay`` processes into the real MariaDB: declared types in their
own tables, the others as JSON documents; declared types checked at start and the only classes
replay rebuilds."""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import os
import re
import sqlite3
import subprocess
import sys
from datetime import UTC

import pytest

from tests.conftest import ROOT
from tests.conftest import scrapy_command as run
from tests.servers import DOCS

PAGES = ["library/json.html", "library/os.html", "library/re.html"]
KINDS = {"SPIDER_MODULES": "tests.spiders"}


def title_of(path: str) -> str:
    """The page's <title>, read from the file (not by the spider's XPath)."""
    text = (DOCS / path).read_text(encoding="utf-8")
    return " ".join(html.unescape(re.search(r"<title>(.*?)</title>", text, re.S).group(1)).split())


def canonical(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def documents(mysql_query) -> dict[tuple[str, str], tuple[str | None, dict]]:
    """``{(item_type, key_hash): (item_key, document)}`` of spider ``kinds``."""
    rows = mysql_query("SELECT item_type, key_hash, item_key, document FROM items WHERE spider = 'kinds'")
    return {(t, h): (k, json.loads(d)) for t, h, k, d in rows}


def counts(mysql_query) -> dict[str, int]:
    return {table: mysql_query(f"SELECT COUNT(*) FROM `{table}`")[0][0] for table in ("articles", "headings", "items")}


def tables(mysql_query) -> set[str]:
    return {row[0] for row in mysql_query("SHOW TABLES")}


def test_dict_dataclass_and_attrs_items_are_stored(docs_site, start_worker, mysql_url, mysql_query):
    """Declared dataclass and attrs types go to their own tables; dicts and classes without a
    schema become documents, keyed by STORAGE_DOCUMENT_KEY's field when they have it, else by
    their content; each type without a schema is announced once; only the tables of the types
    the crawl produced are created (not those of crawler.items, declared too)."""
    urls = [docs_site.url + p for p in PAGES]
    settings = {**KINDS, "STORAGE_DOCUMENT_KEY": "url", "STORAGE_ITEM_TYPES": "tests.items,crawler.items"}
    worker = start_worker(
        "kinds", settings=settings, env={"MYSQL_URL": mysql_url}, args=["-a", f"urls={' '.join(urls)}"]
    )
    assert worker.wait() == 0, worker.output[-3000:]
    assert "Traceback" not in worker.output
    assert tables(mysql_query) == {"articles", "headings", "items"}

    articles = {url: title for url, title in mysql_query("SELECT url, title FROM articles")}
    assert articles == {docs_site.url + p: title_of(p) for p in PAGES}
    assert {(a, lvl) for a, lvl in mysql_query("SELECT anchor, level FROM headings")} == {(u + "#h1", 1) for u in urls}

    stored = documents(mysql_query)
    expected = {}
    for path, url in zip(PAGES, urls):
        expected[("dict", sha1(url))] = (url, {"status": 200, "title": title_of(path), "url": url})
        note = {"page": url, "size": (DOCS / path).stat().st_size}
        expected[("tests.spiders.kinds.Note", sha1(canonical(note)))] = (None, note)
        tag = {"name": path.rsplit("/", 1)[-1].removesuffix(".html")}
        expected[("tests.spiders.kinds.Tag", sha1(canonical(tag)))] = (None, tag)
    constant = {"kind": "the same for every page"}  # three times, one row
    expected[("dict", sha1(canonical(constant)))] = (None, constant)
    assert stored == expected

    announced = [line for line in worker.output.splitlines() if "have no schema" in line]
    assert sorted(re.search(r"Items of type (\S+) ", line).group(1) for line in announced) == [
        "dict",
        "tests.spiders.kinds.Note",
        "tests.spiders.kinds.Tag",
    ]
    assert all(" INFO: " in line and "table 'items'" in line and "docs/items.md" in line for line in announced)
    assert worker.stat("storage/written/items") == 12 and worker.stat("storage/written/articles") == 3


def test_a_second_crawl_of_the_same_items_adds_no_rows(docs_site, start_worker, redis_url, mysql_url, mysql_query):
    """Documents keyed by their content: a second crawl finds them in the cache as stored and
    skips every write; a third one without the cache upserts them onto the same rows."""
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    settings = {**KINDS, "MAX_IDLE_TIME_BEFORE_CLOSE": "1"}
    args = ["-a", "urls=" + " ".join(docs_site.url + p for p in PAGES)]
    first = start_worker("kinds", settings=settings, env=env, args=args)
    assert first.wait() == 0, first.output[-3000:]
    after_first = counts(mysql_query)
    assert after_first == {"articles": 3, "headings": 3, "items": 10}
    second = start_worker("kinds", settings=settings, env=env, args=args)
    assert second.wait() == 0, second.output[-3000:]
    assert second.stat("storage/skipped/unchanged") == 6 * len(PAGES)  # every item, of every kind
    assert counts(mysql_query) == after_first
    third = start_worker("kinds", settings={**settings, "REDIS_CACHE_ENABLED": "False"}, env=env, args=args)
    assert third.wait() == 0, third.output[-3000:]
    assert third.stat("storage/written/items") == 4 * len(PAGES)
    assert counts(mysql_query) == after_first


ARTICLE = {"item_class": "tests.items.Article", "item": {"url": "http://h/a", "title": "A", "words": 3}}
HEADING = {"item_class": "tests.items.Heading", "item": {"anchor": "http://h/a#h1", "level": 1, "text": "A"}}
DICT_DOC = {"item_class": "builtins.dict", "document_type": "dict", "item": {"url": "http://h/a", "n": 1}}
NOTE_DOC = {
    "item_class": "tests.spiders.kinds.Note",
    "document_type": "tests.spiders.kinds.Note",
    "item": {"page": "http://h/a", "size": 5},
}
PAGE = {"url": "http://h/2", "status": 200, "content_hash": "a" * 64, "fetched_at": "2026-01-01T00:00:00+00:00"}


def test_replay_rebuilds_declared_types_and_documents_and_refuses_undeclared_classes(
    redis_url, redis_client, mysql_url, mysql_query
):
    """``scrapy replay`` with STORAGE_ITEM_TYPES naming tests.items: its types and the documents
    are written; crawler.items.Page (declared by default, not by this setting) and a class with
    no document mark are refused with the reason, and kept."""
    undeclared = [
        {"item_class": "crawler.items.Page", "item": PAGE},
        {"item_class": "tests.spiders.kinds.Note", "item": NOTE_DOC["item"]},
    ]
    redis_client.lpush(
        "kinds:items:pending", *(json.dumps(r) for r in [ARTICLE, HEADING, DICT_DOC, NOTE_DOC, *undeclared])
    )
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    settings = [
        "-s",
        "SPIDER_MODULES=crawler.spiders,tests.spiders",
        "-s",
        "STORAGE_ITEM_TYPES=tests.items",
        "-s",
        "STORAGE_DOCUMENT_KEY=url",
    ]
    done = run(["replay", "kinds", "--json", *settings], env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"written": 4, "refused": 2, "left": 0}
    assert mysql_query("SELECT url, title, words FROM articles") == (("http://h/a", "A", 3),)
    assert mysql_query("SELECT anchor, level, text FROM headings") == (("http://h/a#h1", 1, "A"),)
    assert documents(mysql_query) == {
        ("dict", sha1("http://h/a")): ("http://h/a", {"url": "http://h/a", "n": 1}),
        ("tests.spiders.kinds.Note", sha1(canonical(NOTE_DOC["item"]))): (None, NOTE_DOC["item"]),
    }
    kept = [json.loads(r) for r in redis_client.lrange("kinds:items:invalid", 0, -1)]
    assert sorted(json.loads(k["record"])["item_class"] for k in kept) == [
        "crawler.items.Page",
        "tests.spiders.kinds.Note",
    ]
    assert all(
        k["reason"] == "unreplayable"
        and "is not a declared item type" in k["detail"]
        and "STORAGE_ITEM_TYPES" in k["detail"]
        for k in kept
    )
    refusals = [line for line in done.stderr.splitlines() if line.startswith("refused ")]
    assert len(refusals) == 2 and any(
        "'crawler.items.Page' is not a declared item type" in line for line in refusals
    ), done.stderr


def test_a_worker_replays_pending_declared_items_and_documents_when_it_starts(
    docs_site, start_worker, redis_url, redis_client, mysql_url, mysql_query
):
    """The storage pipeline's own replay (at open) rebuilds the declared types of the default
    STORAGE_ITEM_TYPES (tests.items, the items module of SPIDER_MODULES' package) and documents."""
    redis_client.lpush("kinds:items:pending", *(json.dumps(r) for r in [ARTICLE, HEADING, DICT_DOC, NOTE_DOC]))
    worker = start_worker(
        "kinds",
        settings={**KINDS, "MAX_IDLE_TIME_BEFORE_CLOSE": "1"},
        env={"REDIS_URL": redis_url, "MYSQL_URL": mysql_url},
    )
    assert worker.wait() == 0, worker.output[-3000:]
    assert worker.stat("storage/replayed") == 4 and worker.stat("storage/refused") == 0
    assert counts(mysql_query) == {"articles": 1, "headings": 1, "items": 2}
    assert redis_client.llen("kinds:items:pending") == 0


def test_a_pending_document_is_replayed_as_the_same_row():
    """A document kept in the pending list carries the values it was to be stored with (a
    date-time as its ISO text, a set sorted), so its replay writes the same row, not a second."""
    from datetime import datetime

    from scrapy_frontier.pipelines.storage import StoragePipeline
    from scrapy_frontier.schema import DOCUMENTS, document_of
    from scrapy_frontier.storage.replay import rebuild

    item = {"at": datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC), "tags": {"b", "a"}, "n": 1.5}
    row = document_of(item, None).row("kinds")
    record = StoragePipeline._pending_record((DOCUMENTS, item, row, None, None), "storage error: test")
    raw = json.dumps(record, ensure_ascii=False, default=str).encode()  # as DeadLetters.push writes it
    assert rebuild(raw, {}, "kinds", None) == (DOCUMENTS, row)


@pytest.mark.parametrize(
    ("types", "named"),
    [
        ("tests.bad_items.UnknownType", ["tests.bad_items.UnknownType", "size", "'integer'"]),
        ("tests.bad_items.KeyNotAField", ["tests.bad_items.KeyNotAField", "unique_key", "'slug'"]),
        ("tests.bad_items", ["tests.bad_items.UnknownType", "size"]),
        ("tests.no_such_items", ["STORAGE_ITEM_TYPES", "tests.no_such_items"]),
    ],
)
def test_a_schema_that_cannot_work_stops_the_crawl_at_start(types, named, start_worker):
    worker = start_worker(
        "kinds", settings={**KINDS, "STORAGE_ITEM_TYPES": types}, args=["-a", "urls=http://127.0.0.9:1/"]
    )
    assert worker.wait(60) == 1
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and all(word in errors[0] for word in named), worker.output[-3000:]
    assert "Traceback" not in worker.output
    assert worker.stat("downloader/request_count") == 0


def test_validation_refuses_with_reason_and_field(tmp_path):
    """The validation pipeline's drop is an ItemRefused carrying the stat reason and the field."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.pipelines.validation import ItemRefused, ValidationPipeline
    from tests.items import Article, Heading

    crawler = get_crawler(
        type("kinds", (Spider,), {"name": "kinds"}),
        {"TWISTED_REACTOR_ENABLED": False, "DEAD_LETTER_DIR": str(tmp_path)},
    )
    crawler.spider = crawler._create_spider()
    pipeline = ValidationPipeline.from_crawler(crawler)

    async def check():
        await pipeline.open_spider()
        for item, field, reason in [
            (Article(url="http://h/é"), "url", "not_ascii"),
            (Heading(anchor="http://h/#h1", level="1"), "level", "type"),
        ]:
            with pytest.raises(ItemRefused) as info:
                await pipeline.process_item(item)
            assert (info.value.field, info.value.reason) == (field, reason)
        article = Article(url="http://h/a", title="t" * 300)
        assert await pipeline.process_item(article) is article and article.title == "t" * 256  # truncated in place

    asyncio.run(check())
    kept = [json.loads(line) for line in (tmp_path / "kinds.items.invalid.jl").read_text().splitlines()]
    assert [(k["item_class"], k["field"], k["reason"]) for k in kept] == [
        ("tests.items.Article", "url", "not_ascii"),
        ("tests.items.Heading", "level", "type"),
    ]


#: A user's project whose items.py no longer imports (``scrapy.loader.processors`` is gone from
#: Scrapy, as in scrapy-redis's example project); its spider yields one dict (from a ``data:`` URL: no server).
BROKEN_ITEMS_PROJECT = {
    "scrapy.cfg": "[settings]\ndefault = shop.settings\n",
    "shop/__init__.py": "",
    "shop/settings.py": 'SPIDER_MODULES = ["shop.spiders"]\nADDONS = {"scrapy_frontier.addon.DistributedAddon": 0}\n',
    "shop/items.py": "import scrapy\nfrom scrapy.loader.processors import TakeFirst\n\n\nclass Offer(scrapy.Item):\n"
    '    table = "offers"\n    unique_key = "url"\n    url = scrapy.Field(type=str, required=True)\n',
    "shop/spiders/__init__.py": "",
    "shop/spiders/offers.py": "import scrapy\n\n\nclass Offers(scrapy.Spider):\n    name = 'offers'\n"
    "    start_urls = ['data:,offer']\n\n    def parse(self, response):\n        yield {'url': 'http://shop.test/1'}\n",
}


def run_broken_items_project(tmp_path, installed_metadata, *settings: str) -> subprocess.CompletedProcess:
    """``scrapy crawl offers`` (embedded mode) in :data:`BROKEN_ITEMS_PROJECT`, with this
    repository's package and its entry points on the path as ``pip install`` would put them."""
    root = tmp_path / "shop-project"
    for name, text in BROKEN_ITEMS_PROJECT.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    options = [arg for setting in ("TELNETCONSOLE_ENABLED=False", *settings) for arg in ("-s", setting)]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MYSQL_URL", "SCRAPY_SETTINGS_MODULE")}
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "offers", *options],
        cwd=root,
        env={**env, "PYTHONPATH": f"{ROOT}:{installed_metadata}"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_items_module_that_fails_to_import_stops_nothing_unless_declared(tmp_path, installed_metadata):
    """STORAGE_ITEM_TYPES unset: the project's items module is read if it imports; one that
    does not is one WARNING line naming it, the error and the setting, and the crawl stores its
    items as documents."""
    done = run_broken_items_project(tmp_path, installed_metadata)
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "shop.items" in line]
    assert len(warnings) == 1 and " WARNING: " in warnings[0], done.stderr[-3000:]
    assert "No module named 'scrapy.loader.processors'" in warnings[0] and "STORAGE_ITEM_TYPES" in warnings[0]
    assert " ERROR: " not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    db = sqlite3.connect(tmp_path / "shop-project" / "crawl.sqlite3")
    assert db.execute("SELECT spider, item_type, document FROM items").fetchall() == [
        ("offers", "dict", '{"url":"http://shop.test/1"}')
    ]


def test_a_declared_items_module_that_fails_to_import_stops_the_crawl(tmp_path, installed_metadata):
    done = run_broken_items_project(tmp_path, installed_metadata, "STORAGE_ITEM_TYPES=shop.items")
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "STORAGE_ITEM_TYPES: cannot import 'shop.items'" in errors[0], errors
    assert "scrapy.loader.processors" in errors[0]
    assert (
        not (tmp_path / "shop-project" / "crawl.sqlite3").exists()
        or not sqlite3.connect(tmp_path / "shop-project" / "crawl.sqlite3")
        .execute("SELECT name FROM sqlite_master WHERE name = 'items'")
        .fetchall()
    )
