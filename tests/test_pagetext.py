"""A page's ``text`` and ``headings`` (crawler/pagetext.py, docs/items.md) on real sites: Debian's
Python documentation (English, Sphinx) and Debian's manuals in Japanese, Russian and Chinese
(DocBook and Sphinx), crawled by real ``scrapy crawl site`` processes from loopback servers, and
the spider's item built from the same files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import lxml.html
import pytest
from scrapy.http import HtmlResponse, Request

from crawler.pagetext import page_text
from crawler.spiders.site import SiteSpider
from tests.conftest import DEBIAN_DOC_SITES
from tests.oracle import reachable_pages
from tests.servers import DOCS

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
