"""Start requests that behave the same on every Scrapy from 2.11 to 2.19.

Scrapy 2.13 added ``async def start()`` to spiders and ``process_start()`` to spider middlewares;
2.16 stopped calling the spider's ``start_requests()`` and the middlewares' ``process_start_requests()``
(https://docs.scrapy.org/en/latest/news.html). A spider written for an older Scrapy, with
``start_requests()`` and no ``start()``, would then crawl nothing, and say nothing. This middleware,
closest to the spider (the add-on puts it at 990):

- on a Scrapy that no longer calls ``start_requests()``, calls it for a spider that defines it and
  no ``start()``, through the ``process_start_requests()`` of the enabled spider middlewares that
  have no ``process_start()``, in Scrapy's order, and says so in one INFO line;
- marks every start request ``is_start_request`` (Scrapy's own ``StartSpiderMiddleware`` does from
  2.13): the frontier fetches a start request once per crawl, whichever workers yield it;
- yields nothing for a crawl a setting stops at start (it closes as soon as it opens);
- leaves out a scrapy-redis spider's own ``start_requests()``, which pops start URLs from Redis
  without a lease: the frontier takes them under lease instead;
- says at INFO when a spider has no start request at all (no ``start()``, no ``start_requests()``,
  no ``start_urls``): its workers take requests from the shared frontier only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self

import scrapy
from scrapy import Request

from scrapy_frontier.config import failed_at_open
from scrapy_frontier.scrapy_compat import SCRAPY_VERSION, STARTS_FROM_START_REQUESTS
from scrapy_frontier.scrapy_redis_compat import is_redis_spider

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy.crawler import Crawler

__all__ = ["StartRequestsMiddleware"]

logger = logging.getLogger(__name__)


def _defined_by(spider: object, name: str) -> str | None:
    """The module of the class that defines ``name`` for ``spider``, or ``None``."""
    for cls in type(spider).__mro__:
        if name in vars(cls):
            return cls.__module__
    return None


def _own(spider: object, name: str) -> bool:
    """Whether a class of the spider's own (not Scrapy's or scrapy-redis's) defines ``name``."""
    module = _defined_by(spider, name)
    return module is not None and module != "scrapy" and not module.startswith(("scrapy.", "scrapy_redis."))


def own_start_requests(spider: object) -> bool:
    """Whether ``spider`` defines ``start_requests()`` itself and no ``start()`` of its own."""
    return _own(spider, "start_requests") and not _own(spider, "start")


def redis_start_requests(spider: object) -> bool:
    """Whether ``spider`` is a scrapy-redis spider whose ``start_requests()`` is scrapy-redis's own."""
    return is_redis_spider(spider) and (_defined_by(spider, "start_requests") or "").startswith("scrapy_redis.")


class StartRequestsMiddleware:
    """See the module docstring. A spider middleware with both ``process_start()`` and
    ``process_start_requests()``, so that Scrapy 2.13 to 2.15 take it as universal."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_start_requests(self, start_requests: Iterable[Any], spider: scrapy.Spider) -> Iterator[Any]:
        """Scrapy 2.11 to 2.15 (2.13 to 2.15 when a middleware has only this method)."""
        if redis_start_requests(spider) or failed_at_open(self.crawler):
            return
        self._say_if_empty(spider)
        for item in start_requests:
            yield _marked(item)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Scrapy 2.13 and later."""
        spider = self.crawler.spider
        if redis_start_requests(spider) or failed_at_open(self.crawler):
            return
        self._say_if_empty(spider)
        if STARTS_FROM_START_REQUESTS or not own_start_requests(spider):
            async for item in start:
                yield _marked(item)
            return
        logger.info(
            "%s defines start_requests() and no start(): Scrapy %d.%d no longer calls start_requests(), "
            "scrapy-frontier calls it (add an async start() to run it on Scrapy alone)",
            type(spider).__name__,
            *SCRAPY_VERSION,
        )
        for item in self._legacy_chain(spider.start_requests(), spider):  # type: ignore[union-attr]
            yield _marked(item)

    def _legacy_chain(self, start_requests: Iterable[Any], spider: Any) -> Iterable[Any]:
        """``start_requests`` through the ``process_start_requests()`` of the enabled spider
        middlewares that have no ``process_start()``, the one nearest the spider first, as Scrapy
        2.15 and earlier ran them."""
        engine = self.crawler.engine
        middlewares = engine.scraper.spidermw.middlewares if engine is not None else ()
        for middleware in reversed(middlewares):
            if middleware is self or hasattr(middleware, "process_start"):
                continue
            process = getattr(middleware, "process_start_requests", None)
            if process is not None:
                start_requests = process(start_requests, spider)
        return start_requests

    def _say_if_empty(self, spider: Any) -> None:
        if getattr(spider, "start_urls", None) or is_redis_spider(spider):
            return
        if not _own(spider, "start") and not _own(spider, "start_requests"):
            logger.info(
                "%s has no start request (no start(), start_requests() or start_urls): this worker takes "
                "requests from the shared frontier only",
                type(spider).__name__,
            )


def _marked(item: Any) -> Any:
    if isinstance(item, Request):
        item.meta.setdefault("is_start_request", True)
    return item
