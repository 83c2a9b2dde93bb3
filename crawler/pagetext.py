"""The main content of an HTML page: its text, its headings and what the page declares about
itself (author, publication date, canonical URL).

Two rules, one per kind of page (docs/items.md, "The ``site`` spider's items"); which one applies
is :func:`is_documentation`'s test:

- **Documentation pages** (made by Sphinx, Docutils, DocBook XSL, MkDocs, ...) mark their main
  content in the HTML; :func:`page_text` reads it in one walk of the parsed tree:

  - **Main content** is the first ``<main>`` or ``role="main"`` element that holds text (HTML's
    and ARIA's mark of it; Sphinx puts its page body in ``<div class="body" role="main">``; a
    ``<main>`` holding only scripts or an empty ad slot is passed over), else ``<body>``.
    Inside it, what a reader does not read as the page's content is left out: ``script``,
    ``style``, ``noscript``, ``template``; navigation (``<nav>``, ``role="navigation"`` or
    ``"search"``, and DocBook XSL's ``div.navheader`` / ``div.navfooter`` bars of chunked
    output); and permalink anchors (``<a class="headerlink">``, Sphinx's and Python-Markdown's
    ``¶``, or any ``<a href="#...">`` whose whole text is ``¶``, ``§`` or ``#``).
  - **Text** is the text the page itself writes, with white space collapsed as CSS does for
    ``white-space: normal`` (each run of white space becomes one space; leading and trailing
    space is dropped), plus a space where a block-level element (``p``, ``div``, ``li``,
    ``td``, ``h1``, ...: :data:`BLOCK_TAGS`) or ``<br>`` begins or ends. An inline element
    (``span``, ``a``, ``code``, ``strong``, ...) adds nothing: ``では、<strong>aptitude</strong>
    の`` is ``では、aptitude の`` and ``<b>aptitude</b>, откройте`` is ``aptitude, откройте``, as a
    browser shows them (the rule of HTML's ``innerText``, without its line breaks).
  - **Headings** are the ``h1``, ``h2`` and ``h3`` elements of the main content, in document
    order, as ``[level, text]`` with their text made by the same rule (a heading without text is
    left out); none of the page's sidebars or navigation.

- **Every other page** (news, blogs, shops, forums) seldom marks its main content, or marks a
  region that holds menus, "latest news" lists and comments too: trafilatura
  (:func:`article_text`, ``favor_precision``, no comments) finds the article, chosen by its
  figures on the article-extraction benchmark (bench/README.md#page-text). Its text is
  collapsed the same way; the headings are the h1-h3 it keeps.

The author, the publication date and the canonical URL are trafilatura's reading of the page's
own declarations (``<link rel="canonical">``, ``og:url``, ``<meta name="author">``, JSON-LD,
``article:published_time``, bylines, ``<time>``...): of the whole page for ordinary pages, of the
``<head>`` alone for documentation pages (:func:`head_metadata`).
"""

from __future__ import annotations

import re
from copy import deepcopy
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urljoin

from lxml import etree
from lxml.html import document_fromstring
from trafilatura import bare_extraction
from trafilatura.metadata import extract_metadata
from w3lib.url import safe_url_string

if TYPE_CHECKING:
    from collections.abc import Iterator

    from lxml.html import HtmlElement

#: Elements a browser lays out as blocks (display block, list-item, table parts) and ``br``:
#: their start and end separate words. From the HTML Living Standard's rendering section,
#: "15.3 Non-replaced elements".
BLOCK_TAGS = frozenset(
    "address article aside blockquote body br caption center dd details dialog dir div dl dt fieldset"
    " figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr html legend li listing main menu"
    " nav ol optgroup option p plaintext pre search section summary table tbody td tfoot th thead tr ul xmp".split()
)
#: Elements whose content is never shown as text.
SKIPPED_TAGS = frozenset(("script", "style", "noscript", "template"))
#: ARIA roles of navigation, left out of the main content.
NAVIGATION_ROLES = frozenset(("navigation", "search"))
#: DocBook XSL's navigation bars at the top and bottom of each chunk.
NAVIGATION_CLASSES = frozenset(("navheader", "navfooter"))
#: The whole text of a permalink anchor (``<a href="#id">¶</a>``).
PERMALINK_SIGNS = frozenset(("¶", "§", "#"))
#: The headings kept, and their level.
HEADING_LEVELS = {"h1": 1, "h2": 2, "h3": 3}
HEADING_NAMES = frozenset(HEADING_LEVELS)


#: The ``<meta name="generator">`` values of documentation generators, matched at the start of the
#: value, case-insensitively.
DOC_GENERATORS = ("docutils", "sphinx", "docbook", "mkdocs", "doxygen", "javadoc", "texinfo", "makeinfo", "rustdoc")
_IS_DOCUMENTATION = etree.XPath(
    "boolean(/html/head/meta[translate(@name, 'GENERATOR', 'generator') = 'generator']"
    "[re:test(normalize-space(@content), $generators, 'i')]"
    " | //div[@role = 'main'][@class = 'body'] | //div[@class = 'navheader' or @class = 'navfooter'])",
    namespaces={"re": "http://exslt.org/regular-expressions"},
)
_GENERATORS_PATTERN = "^(" + "|".join(re.escape(g) for g in DOC_GENERATORS) + ")"
_MAIN_CANDIDATES = etree.XPath("//main | //*[@role='main']")
_CANONICAL = etree.XPath("/html/head/link[translate(@rel, 'CANONICAL', 'canonical') = 'canonical']/@href")

#: Which rule makes a page's text: ``"trafilatura"`` (documentation pages by :func:`page_text`,
#: every other page by :func:`article_text`) or ``"rule"`` (:func:`page_text` for every page).
EXTRACTORS = ("trafilatura", "rule")
#: htmldate's options for the publication date: the date the page declares as its own (not
#: its last change), without searching its text for anything that looks like a date.
DATE_OPTIONS = {"original_date": True, "extensive_search": False}


class PageText(NamedTuple):
    """What :func:`extract` finds in a page. ``published`` is an ISO 8601 date (``YYYY-MM-DD``);
    ``author``, ``published`` and ``canonical_url`` are ``None`` when the page declares none."""

    text: str
    headings: list[list[int | str]]
    author: str | None = None
    published: str | None = None
    canonical_url: str | None = None


def is_documentation(root: HtmlElement) -> bool:
    """Whether a documentation generator made the page, so that its own markup says where its
    main content is and :func:`page_text`'s rule applies: a ``<meta name="generator">`` naming
    one of :data:`DOC_GENERATORS`, Sphinx's ``<div class="body" role="main">``, or DocBook XSL's
    ``div.navheader`` / ``div.navfooter`` bars."""
    return bool(_IS_DOCUMENTATION(root, generators=_GENERATORS_PATTERN))


def main_content(root: HtmlElement) -> HtmlElement:
    """The main-content element of a parsed page: the first ``<main>`` or ``role="main"`` element
    whose text (by :func:`page_text`'s rule) is not empty, else ``<body>``, else ``root``."""
    return _main(root)[0]


def _main(root: HtmlElement) -> tuple[HtmlElement, str, list[list[int | str]]]:
    for candidate in _MAIN_CANDIDATES(root):
        text, headings = _walk(candidate)
        if text:
            return candidate, text, headings
    body = root.find("body")
    region = body if body is not None else root
    return (region, *_walk(region))


def _left_out(element: HtmlElement, tag: str) -> bool:
    if tag in SKIPPED_TAGS or tag == "nav":
        return True
    if tag == "a":
        classes = element.get("class")
        if classes and "headerlink" in classes.split():
            return True
        href = element.get("href")
        return bool(
            href and href.startswith("#") and len(element) == 0 and (element.text or "").strip() in PERMALINK_SIGNS
        )
    if tag == "div":
        classes = element.get("class")
        if classes and classes in NAVIGATION_CLASSES:
            return True
    role = element.get("role")
    return role is not None and role in NAVIGATION_ROLES


def page_text(root: HtmlElement) -> tuple[str, list[list[int | str]]]:
    """``(text, headings)`` of a parsed page (``response.selector.root``), by the documentation
    pages' rule of this module's docstring: ``text`` a ``str`` (``""`` for a page without any),
    ``headings`` a list of ``[level, text]`` with ``level`` 1, 2 or 3.

    One walk of the tree per ``<main>`` tried, iterative (no recursion limit on deeply nested
    pages); the tree is not changed. Its cost: bench/text_extraction.py, bench/README.md#page-text."""
    return _main(root)[1:]


def _walk(region: HtmlElement) -> tuple[str, list[list[int | str]]]:
    chunks: list[str] = []
    append = chunks.append
    headings: list[list[int | str]] = []
    if region.text:
        append(region.text)
    # Each entry: the children iterator of an open element's parent, the open element, whether
    # it is a block, the index of its entry in ``headings`` (-1 for none) and where its text
    # starts in ``chunks``.
    stack: list[tuple[Iterator[HtmlElement], HtmlElement, bool, int, int]] = []
    children: Iterator[HtmlElement] = iter(region)

    def close(element: HtmlElement, block: bool, heading: int, start: int) -> None:
        """The end of an element: its heading's text, a block's break, then its tail."""
        if heading >= 0:
            headings[heading][1] = " ".join("".join(chunks[start:]).split())
        if block:
            append("\n")
        if element.tail:
            append(element.tail)

    while True:
        for child in children:
            tag = child.tag
            if tag.__class__ is not str or _left_out(child, tag):
                # a comment, a processing instruction or an element left out: only its tail is text
                if child.tail:
                    append(child.tail)
                continue
            block = tag in BLOCK_TAGS
            if block:
                append("\n")
            heading = -1
            if tag in HEADING_LEVELS:
                heading = len(headings)
                headings.append([HEADING_LEVELS[tag], ""])
            start = len(chunks)
            if child.text:
                append(child.text)
            if len(child):
                stack.append((children, child, block, heading, start))
                children = iter(child)
                break
            close(child, block, heading, start)
        else:
            if not stack:
                break
            children, child, block, heading, start = stack.pop()
            close(child, block, heading, start)
    return " ".join("".join(chunks).split()), [h for h in headings if h[1]]


def article_text(root: HtmlElement) -> PageText:
    """The article of an ordinary page by trafilatura (``bare_extraction``, ``favor_precision``,
    no comments, with its metadata), its text collapsed as :func:`page_text` does and its h1-h3
    as headings. trafilatura works on a copy: ``root`` is not changed. A page trafilatura finds
    no text in gets :func:`page_text`'s."""
    # no url given: trafilatura would take it for the canonical URL of a page that declares none
    document = bare_extraction(
        root,
        favor_precision=True,
        include_comments=False,
        with_metadata=True,
        date_extraction_params=DATE_OPTIONS,
    )
    text = " ".join((document.text or "").split()) if document is not None else ""
    if not text:
        return PageText(*page_text(root), *head_metadata(root))
    headings: list[list[int | str]] = []
    for head in document.body.iter("head"):
        level = head.get("rend", "")
        if level in HEADING_NAMES:
            heading = " ".join("".join(head.itertext()).split())
            if heading:
                headings.append([HEADING_LEVELS[level], heading])
    return PageText(text, headings, *_declared(document.author, document.date, document.url))


def head_metadata(root: HtmlElement) -> tuple[str | None, str | None, str | None]:
    """``(author, published, canonical_url)`` as the page's ``<head>`` declares them (its
    ``<meta>``, ``<link rel="canonical">`` and JSON-LD), read by trafilatura's
    ``extract_metadata`` on a copy of the head alone: on a long page, its search of the body
    for bylines and dates costs tens of milliseconds."""
    head = root.find("head")
    if head is None:
        return None, None, None
    page = document_fromstring("<html><body><p></p></body></html>")
    page.insert(0, deepcopy(head))
    document = extract_metadata(page, None, DATE_OPTIONS, True)
    return _declared(document.author, document.date, document.url)


#: The longest canonical URL kept (the ``pages`` column's size); a longer one is left out.
MAX_URL_LENGTH = 2048
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _declared(author: str | None, date: str | None, url: str | None) -> tuple[str | None, str | None, str | None]:
    canonical = safe_url_string(url) if url else None
    if canonical is not None and len(canonical) > MAX_URL_LENGTH:
        canonical = None
    return author or None, date if date and _DATE.fullmatch(date) else None, canonical


def _is_url(url: str) -> bool:
    return url.startswith(("http:", "https:")) and len(url) <= MAX_URL_LENGTH


def extract(root: HtmlElement, url: str, extractor: str = "trafilatura") -> PageText:
    """A page's :class:`PageText`. With ``extractor="trafilatura"``: documentation pages
    (:func:`is_documentation`) by :func:`page_text` with :func:`head_metadata`, others by
    :func:`article_text`. With ``"rule"``: :func:`page_text` for every page and no metadata
    (the cheapest; costs in bench/README.md#page-text). ``url`` is the page's: a relative
    canonical URL is resolved against it.

    Raises ``ValueError`` for an ``extractor`` not in :data:`EXTRACTORS`."""
    if extractor == "rule":
        return PageText(*page_text(root))
    if extractor != "trafilatura":
        raise ValueError(f"extractor must be one of {', '.join(EXTRACTORS)}, not {extractor!r}")
    found = PageText(*page_text(root), *head_metadata(root)) if is_documentation(root) else article_text(root)
    if found.canonical_url is None or not _is_url(found.canonical_url):
        # trafilatura leaves out a relative <link rel="canonical"> (RFC 6596 allows one)
        declared = found.canonical_url or next(iter(_CANONICAL(root)), None)
        canonical = safe_url_string(urljoin(url, declared.strip())) if declared else None
        found = found._replace(canonical_url=canonical if canonical and _is_url(canonical) else None)
    return found


#: A short page that takes trafilatura down every path a page may take (justext's rescue too).
_WARM_UP_PAGE = "<html><head><title>warm-up</title></head><body><p>A short page.</p></body></html>"


def warm_up(extractor: str = "trafilatura") -> None:
    """Run :func:`extract` once on a short page. trafilatura builds tables on its first page
    (justext's stop words of every language: about 0.3 s of CPU); a crawl calls this at start, so
    that the first page a worker takes does not stall its event loop while it holds other requests
    whose send times are booked. Raises ``ValueError`` as :func:`extract` does."""
    extract(document_fromstring(_WARM_UP_PAGE), "http://localhost/", extractor)
