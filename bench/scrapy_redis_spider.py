"""The ``site`` spider as a scrapy-redis 0.9.1 spider, for the benchmark only.

Run with ``-s SPIDER_MODULES=bench.scrapy_redis_spider -s
SCHEDULER=scrapy_redis.scheduler.Scheduler -s DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter``
``-s ADDONS={}`` (this project's add-on off) and REDIS_HOST / REDIS_PORT / REDIS_DB: the same
parsing, links and items as ``crawler.spiders.site``, with
scrapy-redis's scheduler, dupefilter and start-URL feeding (``site:start_urls``).

What scrapy-redis 0.9.1 needs on Scrapy 2.19 (the smallest shims, here only):

1. Its ``RedisMixin`` feeds start URLs from ``start_requests()`` and from ``spider_idle``;
   Scrapy 2.13+ calls ``async start()`` instead, which ``SiteSpider`` defines (and which, without
   ``-a url`` and ``REDIS_URL``, stops the crawl). ``start()`` here yields nothing: the first
   ``spider_idle`` (right after the start) reads ``site:start_urls``.
2. ``RedisMixin.spider_idle_start_time`` is a class attribute set when the module is imported,
   and reset only while ``site:start_urls`` is not empty: a worker idle for a moment (the other
   worker took every queued request) would close once ``MAX_IDLE_TIME_BEFORE_CLOSE`` seconds
   have passed since the import, not since its last request. The clock restarts at ``start()``
   and at every response here, so a worker closes after that many idle seconds.
3. Its scheduler passes ``spider=`` to ``stats.inc_value`` on every request, which Scrapy 2.14+
   deprecates (a ``ScrapyDeprecationWarning`` each time): the scheduler's two stats calls are
   redone without it (:class:`Scheduler`; select it with ``-s
   SCHEDULER=bench.scrapy_redis_spider.Scheduler``).

Everything else of scrapy-redis runs as released: pickled requests in a sorted set
(``site:requests``), one SADD per request for the dupefilter, ``ZRANGE``+``ZREMRANGEBYRANK`` per
request taken, on the reactor thread.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy_redis.scheduler import Scheduler as _RedisScheduler
from scrapy_redis.spiders import RedisMixin

from crawler.spiders.site import SiteSpider

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.crawler import Crawler


class RedisSiteSpider(RedisMixin, SiteSpider):
    name = "site"

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> RedisSiteSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.setup_redis(crawler)
        crawler.signals.connect(spider._active, signals.response_received)
        return spider

    async def start(self) -> AsyncIterator[Any]:
        self._active()
        return
        yield  # an async generator that yields nothing (shim 1)

    def _active(self) -> None:
        self.spider_idle_start_time = int(time.time())  # shim 2


class Scheduler(_RedisScheduler):
    """scrapy-redis's scheduler without the deprecated ``spider=`` stats argument (shim 3)."""

    def enqueue_request(self, request: Any) -> bool:
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.spider)
            return False
        if self.stats:
            self.stats.inc_value("scheduler/enqueued/redis")
        self.queue.push(request)
        return True

    def next_request(self) -> Any:
        request = self.queue.pop(self.idle_before_close)
        if request and self.stats:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request
