"""Page text: the ``site`` spider's extractor against well-kept libraries, on a folder of article
pages with ground truth and on Debian's doc sites.

**Articles** (``FOLDER``, the layout of Scrapinghub/Zyte's article-extraction benchmark:
``html/<id>.html.gz``, ``ground-truth.json`` ``{id: {"articleBody", "url"}}`` and the benchmark's
own ``evaluate.py``): each candidate makes the text of every page from a Scrapy ``HtmlResponse``
(the encoding read from the page's ``<meta>``, as the spider reads it), and the benchmark's
``evaluate`` scores it: precision, recall and F1 over word shingles (4-grams), means over the
pages, with its bootstrap error of F1. ms/page is CPU time from a parsed tree, the least of
``--repeat`` runs (readability-lxml and Resiliparse parse the page themselves: their parse is
in). Candidates: ``this project`` (:func:`crawler.pagetext.extract`, what the spider stores),
the project's rule alone (:func:`crawler.pagetext.page_text`), trafilatura (default,
``favor_precision``, ``favor_recall``; never comments), readability-lxml (``Document.summary``,
made text by the rule), Resiliparse (``extract_plain_text``, ``main_content=True``) and html-text
(the whole page: the floor). ``--crawl`` also serves the pages on loopback, crawls them with
``scrapy crawl site`` (the project's settings, SQLite) and scores the ``text`` it stored: the
figure a user gets.

**Doc sites**: for every page of each site below (the HTML files reachable from its start page, read from
disk: no HTTP), each extractor makes a page's ``text`` and ``headings`` from a Scrapy
``HtmlResponse`` whose tree is already parsed (the spider's link extraction parses it anyway),
and the script prints, per extractor, the CPU it took and how good the result is:

- **ms/page**: CPU time (``time.process_time``) of the extractor per page, the least of
  ``--repeat`` runs of each page; the cost of parsing the page (``parsel.Selector``) is a row of
  its own, and **spider ms/page** times the spider's whole callback (links, follow-up requests
  and the item) with the plain XPath extractor and with this project's.
- **¶ pages**: pages whose text or a heading holds ``¶`` (Sphinx's permalink anchors).
- **nav headings**: pages with a heading that is none of the main content's headings (the
  sidebar's "Table of Contents", "This Page", "Navigation", ...).
- **heading recall**: the main content's h1-h3 found among the headings (compared without
  white space and ``¶``).
- **bad spaces**: spaces in the text that the page does not have: the three characters before
  and after the space are written next to each other in the page's own text (its text nodes
  joined with nothing, a space where a block element begins or ends, white space collapsed),
  never with a space between (``では、 aptitude``, ``aptitude ,``). The count, and in brackets
  the pages with one.
- **text recall / precision**: words (a CJK character is a word) of the main content found in
  the text, and words of the text that are in the main content (multisets). The main content is
  ``<main>`` or ``role="main"`` (Sphinx's page body), else ``<body>`` without DocBook's
  ``navheader`` / ``navfooter`` bars (links to the previous and next pages), each without its
  scripts, styles and permalink anchors.

Extractors: ``plain XPath`` (every text node of the main content, headings from the whole page's
``//h1 | //h2 | //h3``: the simplest extractor, to compare), ``this project``
(:func:`crawler.pagetext.extract`: on these documentation pages, the rule of
:func:`~crawler.pagetext.page_text`), trafilatura (``bare_extraction`` of the parsed tree, its
``head`` elements as headings), readability-lxml (``Document.summary``, made text and headings
by ``page_text``'s rule), jusText (the site language's stop list; the language-independent
settings for Japanese and Chinese, which it has no list for), html-text (``extract_text`` of the
main content; a converter, not a content finder). Run from the repository root; it measures
CPU time, which other work on the machine disturbs less than wall time (compare the rows of one
run with each other):

    pip install -U pip && pip install -r requirements-bench-text.txt
    apt-get install python3.11-doc aptitude-doc-ja aptitude-doc-ru debian-reference-ja \\
        debian-reference-zh-cn developers-reference-ja developers-reference-ru
    python -m bench.text_extraction [FOLDER] [--crawl] [--repeat 3] [--only "this project" "plain XPath"] \\
        [--sites NAME ...] [--json FILE]

``--sites`` without a name skips the doc sites. A site whose package is not installed is skipped
with a line naming it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import json
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lxml import etree
from scrapy import Request
from scrapy.http import HtmlResponse

from crawler.items import Page
from crawler.pagetext import BLOCK_TAGS, extract, main_content, page_text
from crawler.spiders.site import SiteSpider
from tests.oracle import reachable_pages
from tests.servers import HttpServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

OUT = Path(__file__).resolve().parent / "out"


@dataclass
class Site:
    name: str
    language: str
    generator: str
    root: Path
    start: str
    package: str
    pages: list[str] = field(default_factory=list)


SITES = (
    Site("python3.11 docs", "en", "Sphinx", Path("/usr/share/doc/python3.11/html"), "index.html", "python3.11-doc"),
    Site(
        "developers-reference ru",
        "ru",
        "Sphinx",
        Path("/usr/share/developers-reference/ru"),
        "index.html",
        "developers-reference-ru",
    ),
    Site(
        "developers-reference ja",
        "ja",
        "Sphinx",
        Path("/usr/share/developers-reference/ja"),
        "index.html",
        "developers-reference-ja",
    ),
    Site(
        "aptitude manual ru", "ru", "DocBook", Path("/usr/share/doc/aptitude/html/ru"), "index.html", "aptitude-doc-ru"
    ),
    Site(
        "aptitude manual ja", "ja", "DocBook", Path("/usr/share/doc/aptitude/html/ja"), "index.html", "aptitude-doc-ja"
    ),
    Site(
        "debian-reference ja",
        "ja",
        "DocBook",
        Path("/usr/share/debian-reference"),
        "index.ja.html",
        "debian-reference-ja",
    ),
    Site(
        "debian-reference zh-cn",
        "zh",
        "DocBook",
        Path("/usr/share/debian-reference"),
        "index.zh-cn.html",
        "debian-reference-zh-cn",
    ),
)

# --- the plain XPath extractor, to compare ------------------------------------------------------

_PLAIN_TEXT_XPATH = (
    "descendant-or-self::text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template)]"
)


def plain_xpath(response: HtmlResponse) -> tuple[str, list[list[Any]]]:
    main = response.xpath("//main | //*[@role='main']") or response.xpath("//body") or response
    text = " ".join(" ".join(main[0].xpath(_PLAIN_TEXT_XPATH).getall()).split())
    headings = [
        [int(h.root.tag[1]), " ".join(" ".join(h.xpath(".//text()").getall()).split())]
        for h in response.xpath("//h1 | //h2 | //h3")
    ]
    return text, headings


class PlainXPathSpider(SiteSpider):
    """The ``site`` spider with the plain XPath extractor."""

    @staticmethod
    def page(response, links, extractor="trafilatura"):
        text, headings = plain_xpath(response)
        latency = response.meta.get("download_latency")
        request = response.request
        return Page(
            url=request.meta.get("redirect_urls", [request.url])[0] if request else response.url,
            final_url=response.url,
            status=response.status,
            title=" ".join(response.xpath("//title//text()").getall()).strip() or None,
            description=response.xpath(
                "//meta[translate(@name,'DESCRIPTON','descripton')='description']/@content"
            ).get(),
            language=response.xpath("/html/@lang").get(),
            headings=headings,
            text=text,
            links=links,
            content_hash=hashlib.sha256(response.body).hexdigest(),
            fetched_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            depth=response.meta.get("depth", 0),
            latency_ms=round(latency * 1000) if latency is not None else None,
        )


# --- the libraries ------------------------------------------------------------------------------


def this_project(response: HtmlResponse) -> tuple[str, list[list[Any]]]:
    found = extract(response.selector.root, response.url)
    return found.text, found.headings


def trafilatura_extractor(response: HtmlResponse) -> tuple[str, list[list[Any]]]:
    import trafilatura

    doc = trafilatura.bare_extraction(
        response.selector.root, url=response.url, include_comments=False, with_metadata=False
    )
    if doc is None:
        return "", []
    headings = [
        [int(h.get("rend", "h0")[1:] or 0), " ".join("".join(h.itertext()).split())] for h in doc.body.iter("head")
    ]
    return " ".join((doc.text or "").split()), [h for h in headings if h[0] in (1, 2, 3)]


def readability_extractor(response: HtmlResponse) -> tuple[str, list[list[Any]]]:
    import lxml.html
    from readability import Document

    summary = Document(response.text).summary(html_partial=True)
    return page_text(lxml.html.fromstring(summary)) if summary.strip() else ("", [])


_JUSTEXT_LANGUAGES = {"en": "English", "ru": "Russian"}


def justext_extractor(response: HtmlResponse, language: str) -> tuple[str, list[list[Any]]]:
    import justext

    if language in _JUSTEXT_LANGUAGES:
        paragraphs = justext.justext(
            response.body, justext.get_stoplist(_JUSTEXT_LANGUAGES[language]), encoding="utf-8"
        )
    else:  # jusText's language-independent mode: no stop list, no stop-word thresholds
        paragraphs = justext.justext(response.body, frozenset(), stopwords_low=0, stopwords_high=0, encoding="utf-8")
    kept = [p for p in paragraphs if not p.is_boilerplate]
    headings = []
    for p in kept:
        tag = p.dom_path.rsplit(".", 1)[-1]
        if tag in ("h1", "h2", "h3"):
            headings.append([int(tag[1]), " ".join(p.text.split())])
    return " ".join(" ".join(p.text for p in kept).split()), headings


def html_text_extractor(response: HtmlResponse) -> tuple[str, list[list[Any]]]:
    import html_text

    region = main_content(response.selector.root)
    text = html_text.extract_text(region, guess_layout=False)
    headings = [
        [int(h.tag[1]), html_text.extract_text(h, guess_layout=False)] for h in region.xpath(".//h1 | .//h2 | .//h3")
    ]
    return text, headings


EXTRACTORS: dict[str, Callable[[HtmlResponse, str], tuple[str, list[list[Any]]]]] = {
    "plain XPath": lambda r, lang: plain_xpath(r),
    "this project": lambda r, lang: this_project(r),
    "trafilatura": lambda r, lang: trafilatura_extractor(r),
    "readability-lxml": lambda r, lang: readability_extractor(r),
    "jusText": justext_extractor,
    "html-text": lambda r, lang: html_text_extractor(r),
}

# --- the reference: the page's main content, as the page writes it -----------------------------

_LEFT_OUT = etree.XPath(
    "descendant::*[self::script or self::style or self::noscript or self::template"
    " or (self::a and contains(concat(' ', normalize-space(@class), ' '), ' headerlink '))]"
)
_DOCBOOK_BARS = etree.XPath("descendant::div[@class='navheader' or @class='navfooter']")
_CJK = "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")


@dataclass
class Reference:
    """What a page's main content is: the pieces of its own text (every substring of 2 to 7
    characters of its text nodes joined with nothing, white space collapsed, a space where a
    block begins or ends), its words, its headings."""

    pieces: set[str]
    words: Counter
    headings: set[str]


def _squash(text: str) -> str:
    return "".join(text.split()).replace("¶", "")


def reference(response: HtmlResponse) -> Reference:
    import copy

    root = response.selector.root
    found = root.xpath("(//main | //*[@role='main'])[1]")
    region = copy.deepcopy(found[0] if found else root.find("body"))
    region.tail = None
    left_out = _LEFT_OUT(region) + ([] if found else _DOCBOOK_BARS(region))
    for element in left_out:
        element.text = None
        for child in list(element):
            element.remove(child)
    words: Counter = Counter()
    for node in region.xpath("descendant-or-self::text()"):
        words.update(_WORD.findall(node))
    for element in region.iter(*BLOCK_TAGS):
        element.text = "\n" + (element.text or "")
        element.tail = "\n" + (element.tail or "")
    own = " ".join("".join(region.xpath("descendant-or-self::text()")).split())
    pieces = {own[i : i + n] for n in range(2, 8) for i in range(len(own) - n + 1)}
    headings = {_squash("".join(h.itertext())) for h in region.xpath(".//h1 | .//h2 | .//h3")}
    return Reference(pieces, words, headings - {""})


_SPACE = re.compile(r" ")


def bad_spaces(text: str, pieces: set[str]) -> int:
    """Spaces of ``text`` between characters the page writes next to each other (no white space
    and no block boundary between them), and nowhere with a space between."""
    count = 0
    for match in _SPACE.finditer(text):
        i = match.start()
        left = text[max(0, i - 3) : i].rsplit(" ", 1)[-1]
        right = text[i + 1 : i + 4].split(" ", 1)[0]
        if left and right and left + right in pieces and f"{left} {right}" not in pieces:
            count += 1
    return count


# --- articles with ground truth -----------------------------------------------------------------


def load_evaluate(folder: Path) -> ModuleType:
    """The benchmark's own ``evaluate.py`` of ``folder``, imported as a module."""
    spec = importlib.util.spec_from_file_location("article_benchmark_evaluate", folder / "evaluate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ground_truth(folder: Path) -> dict[str, dict[str, str]]:
    """``{id: {"articleBody": text, "url": url}}`` of ``folder/ground-truth.json``."""
    return json.loads((folder / "ground-truth.json").read_text(encoding="utf-8"))


def article_html(folder: Path, page_id: str) -> bytes:
    return gzip.decompress((folder / "html" / f"{page_id}.html.gz").read_bytes())


def score(folder: Path, texts: dict[str, str], n_bootstrap: int = 200, ids: list[str] | None = None) -> dict[str, Any]:
    """The benchmark's scores of ``texts`` (``{id: text}``; a page missing counts as empty) on
    the pages ``ids`` (default: all of the ground truth): ``evaluate.evaluate``'s ``precision``,
    ``recall``, ``f1`` and their ``*_std``, plus ``f1_pages`` (each page's F1) and
    ``empty`` (the pages without text)."""
    evaluate = load_evaluate(folder)
    truth = ground_truth(folder)
    if ids is not None:
        truth = {i: truth[i] for i in ids}
    prediction = {i: {"articleBody": texts.get(i, "")} for i in truth}
    metrics = evaluate.evaluate(truth, prediction, n_bootstrap)
    pages = {}
    for i, (tp, fp, fn) in zip(truth, metrics.pop("tp_fp_fns")):
        p, r = evaluate.precision_score(tp, fp, fn), evaluate.recall_score(tp, fp, fn)
        pages[i] = 2 * p * r / (p + r) if p + r else 0.0
    metrics["f1_pages"] = pages
    metrics["empty"] = sum(not prediction[i]["articleBody"].strip() for i in truth)
    return metrics


def trafilatura_text(response: HtmlResponse, **options: Any) -> str:
    import trafilatura

    doc = trafilatura.bare_extraction(response.selector.root, include_comments=False, **options)
    return doc.text or "" if doc is not None else ""


def resiliparse_text(response: HtmlResponse) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    return extract_plain_text(HTMLTree.parse(response.text), main_content=True)


def html_text_page(response: HtmlResponse) -> str:
    import html_text

    return html_text.extract_text(response.selector.root, guess_layout=False)


ARTICLE_EXTRACTORS: dict[str, Callable[[HtmlResponse], str]] = {
    "this project": lambda r: extract(r.selector.root, r.url).text,
    "the project's rule (PAGE_TEXT_EXTRACTOR=rule)": lambda r: page_text(r.selector.root)[0],
    "trafilatura, favor_precision": lambda r: trafilatura_text(r, favor_precision=True),
    "trafilatura": trafilatura_text,
    "trafilatura, favor_recall": lambda r: trafilatura_text(r, favor_recall=True),
    "readability-lxml": lambda r: readability_extractor(r)[0],
    "Resiliparse, main_content": resiliparse_text,
    "html-text (the whole page)": html_text_page,
}


def measure_articles(folder: Path, repeat: int, n_bootstrap: int) -> dict[str, Any]:
    """Every candidate of :data:`ARTICLE_EXTRACTORS` on ``folder``'s pages: the benchmark's
    scores, CPU ms/page, and the spider's callback ms/page (:func:`spiders`)."""
    truth = ground_truth(folder)
    responses = {i: HtmlResponse(page["url"], body=article_html(folder, i)) for i, page in truth.items()}
    results: dict[str, Any] = {"pages": len(responses), "extractors": {}}
    for label, spider in spiders().items():
        ms = sum(cpu_ms(lambda r=r, s=spider: list(s.parse(_fresh(r))), repeat) for r in responses.values())
        results[label + " ms/page"] = ms / len(responses)
    for name, extractor in ARTICLE_EXTRACTORS.items():
        texts: dict[str, str] = {}
        ms = 0.0
        for i, response in responses.items():
            response.selector  # noqa: B018 (parsed once, as the spider's link extraction does)
            ms += cpu_ms(lambda r=response, i=i, t=texts, x=extractor: t.__setitem__(i, x(r)), repeat)
        metrics = score(folder, texts, n_bootstrap)
        metrics.pop("f1_pages")
        results["extractors"][name] = {**metrics, "ms_per_page": ms / len(responses)}
        print(f"  {name}: F1 {metrics['f1']:.3f}", file=sys.stderr)
    return results


def serve_articles(folder: Path, root: Path, ids: list[str] | None = None) -> dict[str, str]:
    """Write the pages ``ids`` (default: all) of ``folder`` into ``root`` as ``<id>.html`` (as
    fetched: no charset but the page's own ``<meta>``), with an ``index.html`` linking to each;
    returns ``{path: id}``."""
    ids = ids if ids is not None else list(ground_truth(folder))
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for i in ids:
        (root / f"{i}.html").write_bytes(article_html(folder, i))
        paths[f"{i}.html"] = i
    links = "".join(f'<li><a href="{p}">{p}</a></li>' for p in paths)
    (root / "index.html").write_text(f"<!doctype html><html><body><ul>{links}</ul></body></html>")
    return paths


def crawl_articles(folder: Path, n_bootstrap: int) -> dict[str, Any]:
    """``scrapy crawl site`` (a real process, the project's settings, SQLite) on ``folder``'s
    pages served on loopback, and the benchmark's scores of the ``text`` it stored, with the
    crawl's pages/s (responses over the crawl's ``elapsed_time_seconds``; ``DEPTH_LIMIT=1``: the
    index and its pages, not the 404s of the links the pages hold to their own sites)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = serve_articles(folder, work / "site")
        server = HttpServer(work / "site", "127.0.0.17")
        try:
            db = work / "crawl.sqlite3"
            run = subprocess.run(
                [sys.executable, "-m", "scrapy", "crawl", "site", "-a", f"url={server.url}index.html"]
                + ["-s", f"SQLITE_PATH={db}", "-s", f"DEAD_LETTER_DIR={work}", "-s", "AUTOTHROTTLE_ENABLED=False"]
                + ["-s", "TELNETCONSOLE_ENABLED=False", "-s", "LOG_LEVEL=INFO", "-s", "DEPTH_LIMIT=1"],
                cwd=Path(__file__).resolve().parent.parent,
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            server.stop()
        if run.returncode != 0:
            raise SystemExit(f"scrapy crawl site failed ({run.returncode}):\n{run.stderr[-3000:]}")
        texts = {
            paths[url.removeprefix(server.url)]: text
            for url, text in sqlite3.connect(db).execute("SELECT url, text FROM pages")
            if url.removeprefix(server.url) in paths
        }
    elapsed = re.search(r"'elapsed_time_seconds': ([\d.]+)", run.stderr)
    responses = re.search(r"'response_received_count': (\d+)", run.stderr)
    metrics = score(folder, texts, n_bootstrap)
    metrics["stored"] = len(texts)
    metrics["pages_per_s"] = int(responses.group(1)) / float(elapsed.group(1)) if elapsed and responses else None
    metrics["worst"] = sorted(metrics.pop("f1_pages").items(), key=lambda kv: kv[1])[:5]
    return metrics


def article_table(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| extractor | precision | recall | F1 | ms/page |", "|---|---|---|---|---|"]
    for name, m in rows.items():
        lines.append(
            f"| {name} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} ± {m['f1_std']:.3f}"
            f" | {m['ms_per_page']:.2f} |"
        )
    return "\n".join(lines)


# --- the run --------------------------------------------------------------------------------------


def load(site: Site) -> list[HtmlResponse]:
    responses = []
    for path in sorted(reachable_pages(site.root, site.start)):
        body = (site.root / path).read_bytes()
        responses.append(HtmlResponse(f"http://127.0.0.2/{path}", body=body, encoding="utf-8"))
    return responses


def cpu_ms(function: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        function()
        best = min(best, time.process_time() - start)
    return best * 1000


def spiders() -> dict[str, SiteSpider]:
    """The spider's callback as timed: with the plain XPath extractor, with
    ``PAGE_TEXT_EXTRACTOR=rule`` and with the default (trafilatura for ordinary pages)."""
    rule = SiteSpider(url="http://127.0.0.2/")
    rule.extractor = "rule"
    return {
        "spider, plain XPath": PlainXPathSpider(url="http://127.0.0.2/"),
        "spider, rule": rule,
        "spider": SiteSpider(url="http://127.0.0.2/"),
    }


def measure(sites: list[Site], names: list[str], repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {"sites": {}, "extractors": {}}
    totals = {name: Counter() for name in names}
    callbacks = spiders()
    spider_totals = {label: Counter() for label in ("parse", *callbacks)}
    for site in sites:
        responses = load(site)
        site_result: dict[str, Any] = {
            "language": site.language,
            "generator": site.generator,
            "pages": len(responses),
            "extractors": {},
        }
        per_site = {name: Counter() for name in names}
        site_spider = {label: 0.0 for label in spider_totals}
        for response in responses:
            site_spider["parse"] += cpu_ms(lambda r=response: _fresh(r).selector, repeat)
            for label, spider in callbacks.items():
                site_spider[label] += cpu_ms(lambda r=response, s=spider: list(s.parse(_fresh(r))), repeat)
            response.selector  # noqa: B018 (parsed once, as the spider's link extraction does)
            ref = reference(response)
            for name in names:
                out: list[Any] = []
                m = per_site[name]
                m["ms"] += cpu_ms(
                    lambda r=response, o=out, x=EXTRACTORS[name], lang=site.language: o.append(x(r, lang)), repeat
                )
                text, headings = out[-1]
                m["pilcrow_pages"] += "¶" in text or any("¶" in h[1] for h in headings)
                squashed = [_squash(h[1]) for h in headings]
                m["nav_heading_pages"] += any(s and s not in ref.headings for s in squashed)
                m["headings_found"] += len(ref.headings & set(squashed))
                m["headings_ref"] += len(ref.headings)
                bad = bad_spaces(text, ref.pieces)
                m["bad_spaces"] += bad
                m["bad_space_pages"] += bad > 0
                words = Counter(_WORD.findall(text))
                m["words_common"] += sum((words & ref.words).values())
                m["words_ref"] += sum(ref.words.values())
                m["words_out"] += sum(words.values())
                m["pages"] += 1
            response._cached_selector = None  # the tree of a page is freed once measured
        for name in names:
            site_result["extractors"][name] = _summary(per_site[name])
            totals[name] += per_site[name]
        for label, ms in site_spider.items():
            site_result[label + " ms/page"] = ms / len(responses)
            spider_totals[label].update(ms=ms, pages=len(responses))
        results["sites"][site.name] = site_result
        print(f"  {site.name}: {len(responses)} pages", file=sys.stderr)
    for name in names:
        results["extractors"][name] = _summary(totals[name])
    for label, total in spider_totals.items():
        results[label + " ms/page"] = total["ms"] / max(1, total["pages"])
    return results


def _fresh(response: HtmlResponse) -> HtmlResponse:
    """A response as the spider gets it: not parsed yet (the callback parses it)."""
    return HtmlResponse(
        response.url,
        body=response.body,
        encoding=response.encoding,
        request=Request(response.url, meta={"depth": 1}),
    )


def _summary(m: Counter) -> dict[str, Any]:
    pages = max(1, m["pages"])
    return {
        "pages": m["pages"],
        "ms_per_page": m["ms"] / pages,
        "pilcrow_pages": m["pilcrow_pages"],
        "nav_heading_pages": m["nav_heading_pages"],
        "heading_recall": m["headings_found"] / max(1, m["headings_ref"]),
        "bad_space_pages": m["bad_space_pages"],
        "bad_spaces": m["bad_spaces"],
        "text_recall": m["words_common"] / max(1, m["words_ref"]),
        "text_precision": m["words_common"] / max(1, m["words_out"]),
    }


def table(rows: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| extractor | ms/page | ¶ pages | nav headings | heading recall | bad spaces (pages) | text recall | text "
        "precision |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rows.items():
        lines.append(
            f"| {name} | {s['ms_per_page']:.2f} | {s['pilcrow_pages']} | {s['nav_heading_pages']} | "
            f"{s['heading_recall']:.3f}"
            f" | {s['bad_spaces']} ({s['bad_space_pages']}) | {s['text_recall']:.3f} | {s['text_precision']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "folder",
        nargs="?",
        type=Path,
        help="pages with ground truth (html/<id>.html.gz, ground-truth.json, evaluate.py)",
    )
    parser.add_argument("--crawl", action="store_true", help="also score what `scrapy crawl site` stores from FOLDER")
    parser.add_argument("--bootstrap", type=int, default=200, help="evaluate.py's bootstrap samples")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each page; the least CPU time counts")
    parser.add_argument("--only", nargs="+", choices=list(EXTRACTORS), default=list(EXTRACTORS))
    parser.add_argument(
        "--sites", nargs="*", choices=[site.name for site in SITES], default=[site.name for site in SITES]
    )
    parser.add_argument("--json", type=Path, default=OUT / "text_extraction.json")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    if args.folder:
        articles = measure_articles(args.folder, args.repeat, args.bootstrap)
        print(
            f"Articles: {args.folder}, {articles['pages']} pages (the spider's whole callback:"
            f" {articles['spider ms/page']:.2f} ms/page; with PAGE_TEXT_EXTRACTOR=rule"
            f" {articles['spider, rule ms/page']:.2f}; with the plain XPath extractor"
            f" {articles['spider, plain XPath ms/page']:.2f})\n"
        )
        print(article_table(articles["extractors"]))
        if args.crawl:
            crawled = crawl_articles(args.folder, args.bootstrap)
            articles["crawl"] = crawled
            print(
                f"\nscrapy crawl site, {crawled['stored']} pages stored: precision {crawled['precision']:.3f}, recall"
                f" {crawled['recall']:.3f}, F1 {crawled['f1']:.3f} ± {crawled['f1_std']:.3f}, {crawled['empty']} empty;"
                f" {crawled['pages_per_s']:.1f} pages/s; lowest F1: "
                + ", ".join(f"{i[:8]} {f:.2f}" for i, f in crawled["worst"])
            )
        results["articles"] = articles
    sites = []
    for site in (site for site in SITES if site.name in args.sites):
        if (site.root / site.start).is_file():
            sites.append(site)
        else:
            print(
                f"skipped {site.name}: {site.root / site.start} is missing (apt-get install {site.package})",
                file=sys.stderr,
            )
    if sites:
        docs = measure(sites, args.only, args.repeat)
        results.update(docs)
        pages = sum(s["pages"] for s in docs["sites"].values())
        print(
            f"\nDoc sites: {len(sites)} sites, {pages} pages (parse: {docs['parse ms/page']:.2f} ms/page; the spider's"
            f" whole callback: {docs['spider ms/page']:.2f} ms/page; with PAGE_TEXT_EXTRACTOR=rule"
            f" {docs['spider, rule ms/page']:.2f}; with the plain XPath extractor"
            f" {docs['spider, plain XPath ms/page']:.2f})\n"
        )
        print(table(docs["extractors"]))
        for name, site in docs["sites"].items():
            print(
                f"\n{name} ({site['generator']}, {site['language']}, {site['pages']} pages; spider"
                f" {site['spider ms/page']:.2f} ms/page; with PAGE_TEXT_EXTRACTOR=rule"
                f" {site['spider, rule ms/page']:.2f};"
                f" with the plain XPath extractor {site['spider, plain XPath ms/page']:.2f})\n"
            )
            print(table(site["extractors"]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
