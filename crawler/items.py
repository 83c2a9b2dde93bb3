"""Item types and their schemas (see :mod:`scrapy_frontier.schema` for the metadata keys and
docs/items.md for how to declare one). The storage pipeline checks every schema here when a
crawl starts (``STORAGE_ITEM_TYPES`` defaults to this module) and creates a type's table when
its first item comes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from scrapy import Field, Item


class Page(Item):
    """One HTML page, as the ``site`` spider sees it. Stored in the table ``pages``, unique on ``url``."""

    table = "pages"
    unique_key = "url"

    #: The URL that was requested (after Scrapy's safe-URL escaping, so ASCII).
    url = Field(type=str, required=True, max_length=2048, ascii=True, on_too_long="reject")
    #: The URL the body came from, after redirects.
    final_url = Field(type=str, max_length=2048, ascii=True, on_too_long="reject")
    #: HTTP status code of the final response.
    status = Field(type=int, required=True)
    title = Field(type=str, max_length=1024)
    description = Field(type=str, max_length=2048)
    #: The ``lang`` attribute of ``<html>`` (BCP 47 tag).
    language = Field(type=str, max_length=64)
    #: ``[[level, text], ...]`` for every h1, h2 and h3 of the main content, in document order
    #: (crawler/pagetext.py; the rule is in docs/items.md).
    headings = Field(type=list)
    #: The main content's text, the thing a reader came for: a documentation page's main
    #: content, or the article trafilatura finds in any other page; whitespace collapsed
    #: (crawler/pagetext.py; docs/items.md).
    text = Field(type=str)
    #: The author(s) the page declares (``<meta name="author">``, JSON-LD, bylines), as one string.
    author = Field(type=str, max_length=1024)
    #: The publication date the page declares, ISO 8601 (``YYYY-MM-DD``).
    published = Field(type=str, max_length=10, ascii=True, on_too_long="reject")
    #: The URL the page declares as its own (``<link rel="canonical">``, ``og:url``), ASCII-escaped.
    canonical_url = Field(type=str, max_length=2048, ascii=True, on_too_long="reject")
    #: Absolute URLs of every ``<a href>`` on the page, fragments removed, in order, unique.
    links = Field(type=list)
    #: sha256 of the main content (title and main text), hex; of the body when the page has no
    #: main text. What decides that a page changed (docs/revisits.md), and that its stored row
    #: need not be written again (docs/items.md).
    content_hash = Field(type=str, required=True, max_length=64, ascii=True, on_too_long="reject")
    #: With revisits (REVISIT_INTERVAL): when the page was first fetched, when its main content
    #: last changed (UTC, ISO 8601; none before a change), and how many times it changed.
    first_seen = Field(type="datetime")
    changed_at = Field(type="datetime")
    changes = Field(type=int)
    #: When the response arrived (UTC, ISO 8601).
    fetched_at = Field(type="datetime", required=True)
    #: Link depth from the start URL (0 for the start URL itself).
    depth = Field(type=int)
    #: Download latency in milliseconds.
    latency_ms = Field(type=int)


@dataclass
class Module:
    """One module of a Python documentation's module index (``py-modindex.html``), as the
    ``modules`` spider sees it. Stored in the table ``modules``, unique on ``name``.

    A dataclass item: the schema is the fields' ``metadata``, ``table`` and ``unique_key`` are
    class variables.
    """

    table: ClassVar[str] = "modules"
    unique_key: ClassVar[str] = "name"

    #: Dotted module name, e.g. ``os.path``.
    name: str = field(
        metadata={"type": str, "required": True, "max_length": 255, "ascii": True, "on_too_long": "reject"}
    )
    #: Absolute URL of the module's documentation (with its ``#module-...`` anchor); ``None`` for
    #: a package listed without a page of its own (``concurrent``, ``xmlrpc``).
    url: str | None = field(
        default=None, metadata={"type": str, "max_length": 2048, "ascii": True, "on_too_long": "reject"}
    )
    #: The one-line synopsis, whitespace collapsed; ``None`` when the index gives none.
    synopsis: str | None = field(default=None, metadata={"type": str, "max_length": 1024})
    #: The index marks the module "Deprecated".
    deprecated: bool = field(default=False, metadata={"type": bool, "required": True})
