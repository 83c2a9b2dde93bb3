"""Failing a crawl at start-up because of a setting: one log line, then a clean close."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: ``finish_reason`` of a crawl closed because a component could not use its settings;
#: ``scrapy crawl`` then exits with status 2.
CONFIG_ERROR = "config_error"


def fail_at_open(crawler: Crawler, msg: str, *args: Any) -> None:
    """Log ``msg`` once (no traceback) and close the spider as soon as it is open.

    Components call this from ``open``/``open_spider`` instead of raising: Scrapy's engine honours
    a CloseSpider raised from ``spider_opened`` after every component has been opened, whereas
    one raised from the scheduler's ``open`` skips opening the scraper and logs a traceback.
    """
    logger.error(msg, *args)

    def close_now(spider: Any) -> None:
        raise CloseSpider(CONFIG_ERROR)

    crawler.signals.connect(close_now, signals.spider_opened, weak=False)
