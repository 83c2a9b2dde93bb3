"""A page's ``text`` and ``headings`` (crawler/pagetext.py, docs/items.md) on real sites: Debian's
Python documentation (English, Sphinx) and Debian's manuals in Japanese, Russian and Chinese
(DocBook and Sphinx), and news pages of the article-extraction benchmark (scored by its own
``evaluate.py``), crawled by real ``scrapy crawl site`` processes from loopback servers, and the
spider's item built from the same files."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import lxml.html
import pytest
from scrapy.http import HtmlResponse, Request

from bench.text_extraction import ground_truth, score, serve_articles
from crawler.items import Page
from crawler.pagetext import extract, is_documentation, page_text
from crawler.spiders.site import SiteSpider
from scrapy_frontier.schema import schema_of
from scrapy_frontier.storage.backends import MySQLBackend
from scrapy_frontier.storage.ddl import mysql_ddl, sqlite_ddl
from tests.conftest import DEBIAN_DOC_SITES, ROOT
from tests.oracle import reachable_pages
from tests.servers import DOCS, HttpServer

#: The article-extraction benchmark's shared pages (bench/README.md#page-text).
#: The article benchmark's shared pages: TEXTBENCH_DIR, else beside the checkout, else the
#: workplace's copy (a clone elsewhere, as CI's, finds it there).
TEXTBENCH = Path(
    os.environ.get("TEXTBENCH_DIR")
    or next(
        (p for p in (ROOT.parent / "shared" / "textbench", Path("/work/shared/textbench")) if p.is_dir()),
        ROOT.parent / "shared" / "textbench",
    )
)
#: A handful of them: news in English (the WSJ's with its author, date and canonical URL declared;
#: AP's, whose first ``<main>`` is an ad slot holding only scripts), Indonesian, Russian, a blog.
ARTICLES = [
    "042bb7b5fedab6eac7db576522b89b93904c237d344bcbe14a6a5ab7f7335856",
    "e7994d5500875202d93e736e8f0c8a0436107d10add94ce3789001b8c5c32358",
    "05844573ca7e1fba714d715bb11ca08c26e25328999c74a1cb3bc8a0e4399f0f",
    "21486419bb109c5a62a68957f528e6ff29c92f58d8d3c1f2837c86ff3f3e11f9",
    "c4a3637c6696f238cf9fe1c7fbb17bbb6731a71d4f5fe399b9b4fc3294a96a6b",
    "70cb2d5bca75ab5a8f6bb378a38a52f882f6bda508de93b12502e74936d86ff2",
    "5fa3154ec031ab35411a457d78eb5aa92c0e803c5329bd05c001e6d64009e206",
    "5211188428849a31e309ef2475746563ff788b1591c89818c08d5abedec4ef5e",
]
#: Page's fields a ``pages`` table made by an earlier version of the item lacks.
NEW_FIELDS = ("author", "published", "canonical_url")

needs_textbench = pytest.mark.skipif(
    not (TEXTBENCH / "ground-truth.json").is_file(), reason=f"the article benchmark's pages are not at {TEXTBENCH}"
)

#: Sphinx's sidebar headings, in English and in the Russian developers-reference.
SIDEBAR_HEADINGS = {
    "Table of Contents",
    "This Page",
    "Navigation",
    "Previous topic",
    "Next topic",
    "Навигация",
    "Эта страница",
    "Быстрый поиск",
}


def squashed(text: str) -> str:
    return "".join(text.split())


def main_headings(file: Path) -> set[str]:
    """The h1-h3 of a page's main content as the file on disk has them (``role="main"``, else the
    body), without white space and without Sphinx's permalink anchors: an oracle independent of
    the spider."""
    root = lxml.html.fromstring(file.read_bytes())
    for anchor in root.xpath("//a[contains(concat(' ', @class, ' '), ' headerlink ')]"):
        anchor.drop_tree()
    main = (root.xpath("//*[@role='main']") or root.xpath("//body"))[0]
    return {squashed(h.text_content()) for h in main.xpath(".//h1 | .//h2 | .//h3")}


def item(file: Path):
    url = "http://127.0.0.2/" + file.name
    response = HtmlResponse(url, body=file.read_bytes(), encoding="utf-8", request=Request(url))
    return SiteSpider.page(response, [])


@pytest.mark.parametrize(
    ("file", "sentence"),
    [
        # an inline element before punctuation: no space before the comma or the full stop
        (DOCS / "tutorial/controlflow.html", "such an object is iterable, that is, suitable as a target"),
        (DEBIAN_DOC_SITES["aptitude-ru"][1] / "ch01s01s01.html", "Чтобы запустить aptitude, откройте"),
        (DEBIAN_DOC_SITES["developers-reference-ru"][1] / "pkgs.html", "(WNPP). Проверка списка WNPP"),
        # Japanese and Chinese: no space the page does not write, around an inline element
        (
            DEBIAN_DOC_SITES["aptitude-ja"][1] / "ch01s01.html",
            "このセクションでは、aptitude のビジュアルインタフェースの使い方について説明します。aptitude の",
        ),
        (
            DEBIAN_DOC_SITES["debian-reference-zh-cn"][1] / "ch02.zh-cn.html",
            "高级软件包工具 (APT)，它能够使用所有这些资源。",
        ),
    ],
)
def test_inline_elements_add_no_space(debian_doc_sites, file, sentence):
    assert sentence in item(file)["text"]


@pytest.mark.parametrize(
    "file",
    [
        DOCS / "library/json.html",
        DOCS / "tutorial/controlflow.html",
        DEBIAN_DOC_SITES["developers-reference-ru"][1] / "pkgs.html",
    ],
)
def test_sphinx_pages_lose_their_permalinks_and_sidebars(debian_doc_sites, file):
    assert "¶" in file.read_text()
    page = item(file)
    assert "¶" not in page["text"]
    assert page["headings"] and all("¶" not in text for _, text in page["headings"])
    assert not {text for _, text in page["headings"]} & SIDEBAR_HEADINGS
    assert {squashed(text) for _, text in page["headings"]} == main_headings(file)


def test_json_page_headings():
    headings = item(DOCS / "library/json.html")["headings"]
    assert headings[:3] == [[1, "json — JSON encoder and decoder"], [2, "Basic Usage"], [2, "Encoders and Decoders"]]
    assert [3, "Command line options"] in headings


def test_a_crawl_stores_text_and_headings_as_the_pages_show_them(
    debian_doc_sites, tutorial_site, start_worker, tmp_path
):
    """All four Debian sites and the Python tutorial in one crawl: every page stored, none with a
    ``¶`` or a heading outside its main content."""
    tutorial, tutorial_pages = tutorial_site
    sites = {
        name: (server.url, directory, reachable_pages(directory, start), start)
        for name, (server, directory, start) in debian_doc_sites.items()
    }
    sites["python-tutorial"] = (
        tutorial.url,
        DOCS,
        {u.removeprefix(tutorial.url) for u in tutorial_pages},
        "tutorial/index.html",
    )
    db = tmp_path / "crawl.sqlite3"
    worker = start_worker(
        settings={"SQLITE_PATH": str(db)},
        args=["-a", "url=" + " ".join(url + start for url, _, _, start in sites.values())],
    )
    assert worker.wait() == 0, worker.output[-3000:]
    rows = {
        url: (text, json.loads(headings))
        for url, text, headings in sqlite3.connect(db).execute("SELECT url, text, headings FROM pages")
    }
    for name, (url, directory, paths, _) in sites.items():
        assert {url + p for p in paths} <= set(rows), name
        for path in paths:
            text, headings = rows[url + path]
            assert text and "¶" not in text, url + path
            assert all("¶" not in h for _, h in headings), url + path
            assert {squashed(h) for _, h in headings} <= main_headings(directory / path), (url + path, headings)
    ja = sites["aptitude-ja"][0]
    assert "このセクションでは、aptitude のビジュアルインタフェース" in rows[ja + "ch01s01.html"][0]
    ru = sites["aptitude-ru"][0]
    assert "Чтобы запустить aptitude, откройте" in rows[ru + "ch01s01s01.html"][0]


def test_comments_and_left_out_elements_keep_their_tails():
    root = lxml.html.fromstring(
        "<html><body><main><p>a<!-- note -->b<script>x()</script>c<a href='#s'>§</a></p>"
        "<nav><h2>Menu</h2>menu</nav><h2>Title<a class='headerlink' href='#t'>¶</a></h2><h3></h3>"
        "<p>x<br>y</p></main></body></html>"
    )
    assert page_text(root) == ("abc Title x y", [[2, "Title"]])


def test_a_page_nested_deeper_than_the_recursion_limit():
    body = "<html><body>" + "<div><span>x" * 3000 + "</span></div>" * 3000 + "</body></html>"
    response = HtmlResponse("http://h/", body=body.encode(), encoding="utf-8")
    text, headings = page_text(response.selector.root)
    assert set(text) == {"x", " "} and headings == []


def test_an_empty_main_is_passed_over_for_the_one_with_the_text():
    root = lxml.html.fromstring(
        "<html><body><nav>Menu</nav><main><script>ads()</script><div id='ad-slot'></div></main>"
        "<main><h1>Title</h1><p>The article.</p></main><footer>Footer</footer></body></html>"
    )
    assert page_text(root) == ("Title The article.", [[1, "Title"]])
    empty = lxml.html.fromstring("<html><body><main><script>x()</script></main><p>Body text</p></body></html>")
    assert page_text(empty) == ("Body text", [])


def test_which_rule_applies_is_the_generator_s_mark(debian_doc_sites):
    for file in (
        DOCS / "library/json.html",
        DEBIAN_DOC_SITES["aptitude-ja"][1] / "ch01s01.html",
        DEBIAN_DOC_SITES["debian-reference-zh-cn"][1] / "ch02.zh-cn.html",
    ):
        assert is_documentation(lxml.html.fromstring(file.read_bytes())), file
    for generator, documentation in (("MkDocs-1.5.3", True), ("Sphinx 7.2", True), ("WordPress 5.3", False)):
        root = lxml.html.fromstring(f'<html><head><meta name="Generator" content="{generator}"></head><body></body>')
        assert is_documentation(root) is documentation
    root = lxml.html.fromstring('<html><body><div role="main"><p>x</p></div></body></html>')
    assert not is_documentation(root)


@needs_textbench
def test_an_ordinary_page_stores_its_article_and_what_it_declares():
    truth = ground_truth(TEXTBENCH)
    page_id = ARTICLES[0]
    url = truth[page_id]["url"]
    html = (TEXTBENCH / "html" / f"{page_id}.html.gz").read_bytes()
    import gzip

    response = HtmlResponse(url, body=gzip.decompress(html), request=Request(url))
    assert not is_documentation(response.selector.root)
    page = SiteSpider.page(response, [])
    assert (page["author"], page["published"], page["canonical_url"]) == (
        "Sarah E Needleman",
        "2019-11-19",
        "https://www.wsj.com/articles/google-stadia-microsoft-xcloud-apple-arcade-so-many-ways-to-playand-pay-11574168580",
    )
    assert score(TEXTBENCH, {page_id: page["text"]}, 1, [page_id])["f1"] > 0.95
    rule = SiteSpider.page(response, [], "rule")
    assert rule["author"] is None and len(rule["text"]) > len(page["text"])


def test_a_relative_canonical_url_is_made_absolute():
    root = lxml.html.fromstring(
        '<html><head><link rel="canonical" href="/a/b?x=1"><meta name="author" content="A. Writer"></head>'
        "<body><article><p>" + "Some words of an article. " * 40 + "</p></article></body></html>"
    )
    found = extract(root, "http://127.0.0.2/c/d.html")
    assert (found.author, found.canonical_url) == ("A Writer", "http://127.0.0.2/a/b?x=1")


@needs_textbench
def test_a_crawl_of_news_pages_stores_their_articles(start_worker, tmp_path):
    """``scrapy crawl site`` on a handful of the benchmark's pages served on loopback, into a
    ``pages`` table made before Page had its author, published and canonical_url: the columns
    are added, and the stored text scores as the benchmark scores extractors."""
    paths = serve_articles(TEXTBENCH, tmp_path / "site", ARTICLES)
    db = tmp_path / "crawl.sqlite3"
    schema = schema_of(Page)
    old = dataclasses.replace(schema, fields=tuple(f for f in schema.fields if f.name not in NEW_FIELDS))
    with sqlite3.connect(db) as conn:
        conn.execute(sqlite_ddl(old))
        conn.execute(
            "INSERT INTO pages (url, status, content_hash, fetched_at) VALUES ('http://old/', 200, 'x', '2020-01-01')"
        )
    server = HttpServer(tmp_path / "site", "127.0.0.17")
    try:
        worker = start_worker(
            settings={"SQLITE_PATH": str(db), "DEPTH_LIMIT": "1"}, args=["-a", f"url={server.url}index.html"]
        )
        assert worker.wait() == 0, worker.output[-3000:]
    finally:
        server.stop()
    assert "lacks the column(s) author, published, canonical_url" in worker.output
    rows = {
        url.removeprefix(server.url): row
        for url, *row in sqlite3.connect(db).execute("SELECT url, text, author, published, canonical_url FROM pages")
    }
    assert rows.pop("http://old/") == [None, None, None, None]
    texts = {paths[path]: row[0] for path, row in rows.items() if path in paths}
    assert set(texts) == set(ARTICLES) and all(texts.values())
    assert score(TEXTBENCH, texts, 1, ARTICLES)["f1"] >= 0.9
    assert rows[f"{ARTICLES[0]}.html"][1:] == [
        "Sarah E Needleman",
        "2019-11-19",
        "https://www.wsj.com/articles/google-stadia-microsoft-xcloud-apple-arcade-so-many-ways-to-playand-pay-11574168580",
    ]


def test_mysql_adds_the_columns_an_existing_table_lacks(mysql_url, mysql_query, caplog):
    schema = schema_of(Page)
    old = dataclasses.replace(schema, fields=tuple(f for f in schema.fields if f.name not in NEW_FIELDS))
    backend = MySQLBackend(mysql_url)
    backend.connect()
    try:
        backend._run(lambda cur: cur.execute(mysql_ddl(old)))
        backend.ensure_table(schema)
        backend.ensure_table(schema)  # a second worker finds them there
    finally:
        backend.close()
    columns = {row[0]: row[1] for row in mysql_query("SHOW COLUMNS FROM pages")}
    assert (columns["author"], columns["published"], columns["canonical_url"]) == (
        "varchar(1024)",
        "varchar(10)",
        "varchar(2048)",
    )
    assert [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()] == [
        f"Table pages in {backend.name} lacks the column(s) author, published, canonical_url of its item type: added "
        "(NULL in the rows already stored)"
    ]


def test_an_unknown_extractor_stops_the_crawl_at_start(start_worker):
    worker = start_worker(settings={"PAGE_TEXT_EXTRACTOR": "fast"}, args=["-a", "url=http://127.0.0.2/"])
    assert worker.wait() == 1, worker.output[-3000:]
    assert "PAGE_TEXT_EXTRACTOR must be one of trafilatura, rule, not 'fast'" in worker.output


def test_the_site_spider_has_trafilatura_build_its_tables_when_created():
    """trafilatura builds tables on its first page (justext's stop words of every language, about
    0.3 s of CPU): the spider has that done when it is created, at start, not on the first page a
    worker takes while it holds other requests booked to leave (a worker joining a crawl stalled
    its host's turn by that long)."""
    code = (
        "import trafilatura.external as t\n"
        "from scrapy.utils.test import get_crawler\n"
        "from crawler.spiders.site import SiteSpider\n"
        "assert t.JT_STOPLIST is None, 'built at import already'\n"
        "SiteSpider.from_crawler(get_crawler(SiteSpider))\n"
        "print(len(t.JT_STOPLIST or ()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert int(out.split()[-1]) > 10_000
