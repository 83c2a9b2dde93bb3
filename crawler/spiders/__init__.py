"""Spiders: ``site`` (generic site crawler, one Page per HTML page) and ``modules`` (the Python
module index, one Module per module). Both take their start URLs from ``-a url=`` or, in
distributed mode, from ``<spider>:start_urls``: :func:`url_argument` and :func:`checked_start_urls`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.exceptions import CloseSpider

from scrapy_frontier.config import CONFIG_ERROR
from scrapy_frontier.serialize import RequestRefused, check_url

if TYPE_CHECKING:
    import scrapy


def url_argument(url: str | None) -> list[str]:
    """The start URLs of ``-a url=`` (several separated by white space); ``-a url=''`` stays one
    empty URL, refused by :func:`checked_start_urls` rather than silently ignored."""
    if url is None:
        return []
    return url.split() or [url]


def checked_start_urls(spider: scrapy.Spider, example: str) -> list[str]:
    """``spider.start_urls`` made safe (RFC 3986 escaping), each checked as a worker checks a
    pushed URL. Raises ``CloseSpider(config_error)`` (``scrapy crawl`` exits with status 2) after
    one error line per refused URL, or when there is no start URL and no ``REDIS_URL`` to take
    them from; ``example`` is the command line the error suggests."""
    if not spider.start_urls and not spider.settings.get("REDIS_URL"):
        spider.logger.error("No start URL: run `%s` (or set REDIS_URL and push to %s:start_urls)", example, spider.name)
        raise CloseSpider(CONFIG_ERROR)
    urls = []
    for url in spider.start_urls:
        try:
            urls.append(check_url(url))
        except RequestRefused as exc:
            spider.logger.error("Refused -a url=%r: %s", url, exc)
            spider.crawler.stats.inc_value(f"start_urls/refused/{exc.reason}")
    if len(urls) < len(spider.start_urls):
        raise CloseSpider(CONFIG_ERROR)  # a mistyped command line: stop, exit status 2
    return urls
