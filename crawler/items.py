"""Item types and their schemas (see :mod:`scrapy_frontier.schema` for the metadata keys)."""

from __future__ import annotations

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
    #: ``[[level, text], ...]`` for every h1, h2 and h3, in document order.
    headings = Field(type=list)
    #: Visible text of the main content, whitespace collapsed.
    text = Field(type=str)
    #: Absolute URLs of every ``<a href>`` on the page, fragments removed, in order, unique.
    links = Field(type=list)
    #: sha256 of the response body, hex.
    content_hash = Field(type=str, required=True, max_length=64, ascii=True, on_too_long="reject")
    #: When the response arrived (UTC, ISO 8601).
    fetched_at = Field(type="datetime", required=True)
    #: Link depth from the start URL (0 for the start URL itself).
    depth = Field(type=int)
    #: Download latency in milliseconds.
    latency_ms = Field(type=int)
