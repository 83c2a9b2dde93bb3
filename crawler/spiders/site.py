"""``site``: a generic crawler that stays on each start URL's host and yields one Page per HTML page."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urlsplit

from scrapy.http import HtmlResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension

from crawler.items import Page
from crawler.pagetext import EXTRACTORS, extract, warm_up
from crawler.spiders import StartUrlSpider
from scrapy_frontier.config import fail_at_open

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.crawler import Crawler


#: Request meta key holding the hosts a request's descendants may visit.
HOSTS_META = "site_hosts"


def main_content_hash(response: HtmlResponse, text: str | None) -> str:
    """SHA-256 (hex) of the page's title and main text, or of its body when it has no main
    text: adverts, timestamps and link boxes outside the main content do not change it."""
    if not text:
        return hashlib.sha256(response.body).hexdigest()
    title = " ".join(response.xpath("//title//text()").getall()).strip()
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()


class SiteSpider(StartUrlSpider):
    """Crawl every page of the start URLs' hosts.

    Start URLs come from ``-a url=URL`` (several separated by white space; a URL that is not
    http(s) stops the crawl with ``config_error``), or, in distributed mode,
    from the Redis list ``site:start_urls``. Each start URL's host (and the host it redirects to)
    becomes the allowed domain of the requests that descend from it; ``DEPTH_LIMIT`` applies.
    """

    name = "site"

    example = "scrapy crawl site -a url=https://host/"

    def __init__(self, *args: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, url=url, **kwargs)
        self._links = LinkExtractor(deny_extensions=[], unique=True, canonicalize=False)
        self.extractor = "trafilatura"

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> SiteSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        extractor = crawler.settings.get("PAGE_TEXT_EXTRACTOR") or "trafilatura"
        if extractor in EXTRACTORS:
            spider.extractor = extractor
            warm_up(extractor)
        else:
            fail_at_open(crawler, "PAGE_TEXT_EXTRACTOR must be one of %s, not %r", ", ".join(EXTRACTORS), extractor)
        return spider

    def parse(self, response: Any) -> Iterator[Any]:
        hosts = self._hosts(response)
        if not isinstance(response, HtmlResponse):
            return
        links = []
        seen = set()
        for link in self._links.extract_links(response):
            url = urldefrag(link.url)[0]
            if url not in seen:
                seen.add(url)
                links.append(url)
        yield self.page(response, links, self.extractor)
        for url in links:
            parts = urlsplit(url)
            if (
                parts.scheme in ("http", "https")
                and parts.hostname in hosts
                and not url_has_any_extension(url, IGNORED_EXTENSIONS)
            ):
                yield response.follow(url, callback=self.parse, meta={HOSTS_META: hosts})

    @staticmethod
    def _hosts(response: Any) -> list[str]:
        hosts = list(response.meta.get(HOSTS_META) or [urlsplit(response.request.url).hostname])
        final_host = urlsplit(response.url).hostname
        if response.meta.get("depth", 0) == 0 and final_host not in hosts:
            hosts.append(final_host)
        return hosts

    @staticmethod
    def page(response: HtmlResponse, links: list[str], extractor: str = "trafilatura") -> Page:
        """Build the :class:`Page` item of an HTML response (``text``, ``headings``, ``author``,
        ``published`` and ``canonical_url`` by :func:`crawler.pagetext.extract` with
        ``extractor``)."""
        found = extract(response.selector.root, response.url, extractor)
        latency = response.meta.get("download_latency")
        request = response.request
        # a start URL's fragment names a place in the page, not another page
        return Page(
            url=urldefrag(request.meta.get("redirect_urls", [request.url])[0] if request else response.url)[0],
            final_url=urldefrag(response.url)[0],
            status=response.status,
            title=" ".join(response.xpath("//title//text()").getall()).strip() or None,
            description=response.xpath(
                "//meta[translate(@name,'DESCRIPTON','descripton')='description']/@content"
            ).get(),
            language=response.xpath("/html/@lang").get(),
            headings=found.headings,
            text=found.text,
            author=found.author,
            published=found.published,
            canonical_url=found.canonical_url,
            links=links,
            content_hash=main_content_hash(response, found.text),
            fetched_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            depth=response.meta.get("depth", 0),
            latency_ms=round(latency * 1000) if latency is not None else None,
        )
