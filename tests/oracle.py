"""An independent answer to "which pages does a full crawl of this directory store?": a
breadth-first walk of the HTML files on disk, following <a href> and <area href> as a browser
resolves them, skipping the extensions Scrapy's link extractor skips."""

from __future__ import annotations

from collections import deque
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import lxml.html
from scrapy.linkextractors import IGNORED_EXTENSIONS


@cache
def reachable_pages(root: Path, start: str, within: str | None = None) -> frozenset[str]:
    """Paths (relative to ``root``, as URL paths without the leading slash) of the HTML pages
    reachable from ``start``, by the links inside the elements the CSS selector ``within``
    matches (a LinkExtractor's ``restrict_css``), or by every link. Kept per process: the python
    docs take seconds to walk, and the files do not change during a test session."""
    base = "http://oracle.invalid/"
    seen = {start}
    pages = set()
    todo = deque([start])
    while todo:
        path = todo.popleft()
        file = root / unquote(urlsplit(path).path)
        if file.is_dir():
            file = file / "index.html"
        if not file.is_file() or file.suffix not in (".html", ".htm"):
            continue
        pages.add(path)
        doc = lxml.html.fromstring(file.read_bytes())
        page_url = base + path
        base_href = doc.xpath("//base/@href")
        if base_href:
            page_url = urljoin(page_url, base_href[0].strip())
        scopes = doc.cssselect(within) if within else [doc]
        for href in [href for scope in scopes for href in scope.xpath(".//a/@href | .//area/@href")]:
            url = urldefrag(urljoin(page_url, href.strip()))[0]
            if not url.startswith(base):
                continue
            rel = url[len(base) :]
            ext = Path(urlsplit(url).path).suffix.lower().lstrip(".")
            if ext in IGNORED_EXTENSIONS or rel in seen:
                continue
            seen.add(rel)
            todo.append(rel)
    return frozenset(pages)
