"""Spiders: ``site`` (generic site crawler, one Page per HTML page) and ``modules`` (the Python
module index, one Module per module). Both take their start URLs from ``-a url=`` or, in
distributed mode, from ``<spider>:start_urls``: :func:`url_argument` and :func:`checked_start_urls`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import scrapy
from scrapy import signals

from scrapy_frontier.config import fail_at_open
from scrapy_frontier.connection import ConfigError, redis_url
from scrapy_frontier.serialize import RequestRefused, check_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.crawler import Crawler


def url_argument(url: str | None) -> list[str]:
    """The start URLs of ``-a url=`` (several separated by white space); ``-a url=''`` stays one
    empty URL, refused by :func:`checked_start_urls` rather than silently ignored."""
    if url is None:
        return []
    return url.split() or [url]


def _has_redis(spider: scrapy.Spider) -> bool:
    """Whether the crawl has a Redis to take start URLs from: ``REDIS_URL``, or the one scrapy-redis's
    ``REDIS_HOST`` / ``REDIS_PORT`` name (:func:`~scrapy_frontier.connection.redis_url`)."""
    try:
        return bool(redis_url(spider.settings))
    except ConfigError:
        return True  # a malformed one: the scheduler says so, in one line of its own


def checked_start_urls(spider: scrapy.Spider, example: str) -> list[str]:
    """``spider.start_urls`` made safe (RFC 3986 escaping), each checked as a worker checks a
    pushed URL; called when the spider is made (``from_crawler``), before any component opens.
    One error line per refused URL, or one when there is no start URL and no ``REDIS_URL`` to
    take them from (``example`` is the command line it suggests), and the crawl stops as soon as
    it opens (:func:`~scrapy_frontier.config.fail_at_open`: ``scrapy crawl`` exits with status 1)
    with nothing written: no database file, no key in Redis."""
    crawler = spider.crawler
    if not spider.start_urls and not _has_redis(spider):
        fail_at_open(
            crawler, "No start URL: run `%s` (or set REDIS_URL and push to %s:start_urls)", example, spider.name
        )
        return []
    urls, refused = [], []
    for url in spider.start_urls:
        try:
            urls.append(check_url(url))
        except RequestRefused as exc:
            fail_at_open(crawler, "Refused -a url=%r: %s", url, exc)
            refused.append(exc.reason)
    if refused:

        def count(spider: scrapy.Spider) -> None:  # the crawler's stats exist once the crawl opens
            for reason in refused:
                crawler.stats.inc_value(f"start_urls/refused/{reason}")

        crawler.signals.connect(count, signals.spider_opened, weak=False)
    return urls if not refused else []


class StartUrlSpider(scrapy.Spider):
    """A spider whose start URLs come from ``-a url=URL`` (several separated by white space),
    checked when the spider is made (:func:`checked_start_urls`), or, in distributed mode, from
    ``<spider>:start_urls``. ``example`` is the command line a missing start URL suggests."""

    example = "scrapy crawl <spider> -a url=https://host/"
    #: In distributed mode, workers wait for pushed start URLs when the crawl runs dry, until
    #: MAX_IDLE_TIME_BEFORE_CLOSE (scrapy_frontier.scrapy_redis_compat.waits_for_start_urls).
    waits_for_start_urls = True

    def __init__(self, *args: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start_urls = url_argument(url)

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.start_urls = checked_start_urls(spider, cls.example)
        return spider

    def start_requests(self) -> Iterator[scrapy.Request]:
        """The start requests on Scrapy 2.11 and 2.12, which do not call :meth:`start`."""
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse)

    async def start(self) -> AsyncIterator[Any]:
        for request in self.start_requests():
            yield request
