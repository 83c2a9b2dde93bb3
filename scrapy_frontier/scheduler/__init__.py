"""The Scrapy scheduler of distributed mode: a thin adapter between Scrapy's engine and the shared
:class:`~scrapy_frontier.frontier.Frontier`.

Its parts: :mod:`.config` reads the settings once; :mod:`.join` joins the crawl and returns a ready
session; :mod:`.loop` holds the local buffers and runs the background task; :mod:`.seen_cache`
is the local first look before the shared dupefilter; :mod:`.leases` ends this worker's leases;
:mod:`.start_urls` turns start-URL payloads into requests. The engine calls
:meth:`FrontierScheduler.enqueue_request` and :meth:`FrontierScheduler.next_request`
synchronously: neither touches Redis.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.utils.defer import deferred_from_coro

from scrapy_frontier import scrapy_internals
from scrapy_frontier.config import fail_at_open, failed_at_open
from scrapy_frontier.nodes import node_id_of
from scrapy_frontier.redis_health import redis_health
from scrapy_frontier.scheduler.config import SchedulerConfig
from scrapy_frontier.scheduler.join import NodeHooks, join
from scrapy_frontier.scheduler.leases import FAILED_META, LEASE_META
from scrapy_frontier.scheduler.loop import FrontierLoop
from scrapy_frontier.scrapy_redis_compat import take_over
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

__all__ = ["FAILED_META", "LEASE_META", "FrontierScheduler"]

logger = logging.getLogger(__name__)


class FrontierScheduler(BaseScheduler):
    """Scrapy scheduler backed by the shared Redis frontier (settings: docs/settings.md)."""

    def __init__(self, crawler: Crawler, config: SchedulerConfig) -> None:
        self.crawler = crawler
        self.config = config
        self.node_id = node_id_of(crawler)
        #: Reports Redis outages and a Redis out of memory once for the worker.
        self.health = redis_health(crawler)
        #: The joined crawl's loop: ``None`` until :meth:`open` has joined, and for good when the
        #: crawl could not be joined (it then stops as soon as it opens).
        self.loop: FrontierLoop | None = None
        #: The reactor's asyncio loop, where the heartbeat thread's hooks hand their work.
        self._asyncio_loop: asyncio.AbstractEventLoop | None = None
        self._started = time.time()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        return cls(crawler, SchedulerConfig.from_crawler(crawler))

    # -- engine interface ---------------------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None]:
        return deferred_from_coro(self._open(spider))

    async def _open(self, spider: Spider) -> None:
        try:
            config = self.config.for_spider(spider, self.crawler.settings)
        except ValueError as exc:
            fail_at_open(self.crawler, "%s", exc)
            return
        self._asyncio_loop = asyncio.get_running_loop()
        hooks = NodeHooks(
            info=self._node_info, dropped=self._dropped, reclaimed=self._reclaimed, state_lost=self._state_lost
        )
        session = await join(self.crawler, config, spider, self.node_id, self.health, hooks)
        if session is None:
            return
        loop = self.loop = FrontierLoop(self.crawler, config, spider, session, self.node_id, self.health)
        take_over(self.crawler, spider, config.queue_order, session.keys.start_urls)
        self.crawler.signals.connect(self._record_crawl, signals.spider_opened)
        self.crawler.signals.connect(loop.on_idle, signals.spider_idle)
        self.crawler.signals.connect(self._on_spider_error, signals.spider_error)
        if config.autothrottle is not None:
            self.crawler.signals.connect(loop.response_downloaded, signals.response_downloaded)
        scrapy_internals.after_scrape(self.crawler, loop.leases.scraped)
        scrapy_internals.after_downloader_request(self.crawler, loop.leases.handed_on)
        loop.start()

    async def _record_crawl(self) -> None:
        """Record the crawl once every component has opened without a setting stopping it."""
        if self.loop is not None and not failed_at_open(self.crawler):
            await self.loop.record_crawl()

    def close(self, reason: str) -> Deferred[None] | None:
        if self.loop is None:
            return None
        return deferred_from_coro(self.loop.close(reason))

    def has_pending_requests(self) -> bool:
        return self.loop is not None and len(self.loop) > 0

    def enqueue_request(self, request: Request) -> bool:
        return self.loop is not None and self.loop.enqueue(request) == "queued"

    def next_request(self) -> Request | None:
        return self.loop.next_request() if self.loop is not None else None

    def _on_spider_error(self, failure: Failure, response: Any, spider: Spider) -> None:
        if self.loop is not None:
            self.loop.leases.callback_failed(failure, getattr(response, "request", None))

    # -- the heartbeat thread's hooks --------------------------------------------------------

    def _node_info(self) -> dict[str, Any]:
        if self.loop is not None:
            return self.loop.node_info()
        return {"host": socket.gethostname(), "pid": os.getpid(), "started": int(self._started), "leases": 0}

    def _dropped(self) -> None:
        if self.loop is not None:
            self.loop.dropped()

    def _state_lost(self) -> None:
        if self.loop is not None:
            self.loop.state_lost()

    def _reclaimed(self, leases: int, nodes: int) -> None:
        if self._asyncio_loop is not None:
            self._asyncio_loop.call_soon_threadsafe(self.crawler.stats.inc_value, "frontier/reclaimed", leases)
        # a dead node that held nothing (it stopped between batches) is worth a line, not a warning
        logger.log(
            logging.WARNING if leases else logging.INFO,
            "Reclaimed %s from %s",
            plural(leases, "lease"),
            plural(nodes, "dead node"),
        )
