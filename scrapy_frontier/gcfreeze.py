"""Keep the objects that live for the whole crawl out of Python's full garbage collections.

A crawl allocates requests, responses and tasks fast enough that CPython (3.11) runs a full
collection of the oldest generation every ten or so collections of the middle one, and each
full collection walks every container object the process holds: the ~100,000 of the imported
modules, the settings and the components as much as the live requests.

Once the spider is open, :func:`gc.freeze` moves every object alive then to the permanent
generation, which collections skip (https://docs.python.org/3/library/gc.html#gc.freeze): the
full collections then walk only what the crawl itself holds. Garbage is collected first, so
nothing unreachable is frozen. Frozen objects are still freed when their reference count drops
to zero; a reference cycle among them that becomes garbage later stays in memory (startup
objects are not expected to make any).

Setting: ``GC_FREEZE_ENABLED`` (bool, default ``True``).
"""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from scrapy_frontier.config import read_setting

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class GcFreeze:
    def __init__(self, crawler: Crawler) -> None:
        if not read_setting(crawler, "GC_FREEZE_ENABLED"):
            raise NotConfigured("GC_FREEZE_ENABLED is off")
        crawler.signals.connect(self.spider_opened, signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> GcFreeze:
        return cls(crawler)

    def spider_opened(self, spider: Spider) -> None:
        gc.collect()
        gc.freeze()
        logger.debug("Froze %d objects out of the garbage collector's full collections", gc.get_freeze_count())
