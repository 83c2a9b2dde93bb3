"""The progress line, with the cluster's figures in distributed mode.

:class:`ClusterLogStats` takes the place of Scrapy's ``LogStats`` (the add-on puts it there;
``CLUSTER_LOGSTATS_ENABLED=False`` keeps only this worker's figures). Every ``LOGSTATS_INTERVAL``
seconds it logs Scrapy's line for this worker; when ``REDIS_URL`` is set the same line goes on
with the whole crawl's figures, read in one round trip from the cluster totals
(``<spider>:stats``, written by :mod:`scrapy_frontier.observability.totals`) and the frontier's
status script, sent together::

    Crawled 120 pages (at 60 pages/min), scraped 118 items (at 59 items/min); cluster: 530 pages
    (at 240 pages/min), 512 items written, 1840 queued, 2 workers

"items written" counts the items the storage pipeline committed: an upsert each, so where rows
are keyed by content (``unique_key``) several items may become one row.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from scrapy.extensions.logstats import LogStats

from scrapy_frontier.config import failed_at_open, read_setting
from scrapy_frontier.connection import REDIS_FAILURES, client_failure, describe_error, optional_shared_redis
from scrapy_frontier.frontier import Frontier
from scrapy_frontier.keys import keys_of
from scrapy_frontier.nodes import node_id_of
from scrapy_frontier.status import Status
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: A failure of the cluster read: Redis's, or redis-py's cluster client failing in its own code.
_READ_FAILURES: tuple[type[BaseException], ...] = (*REDIS_FAILURES, AttributeError)

LOCAL = "Crawled %(pages)d pages (at %(pagerate)d pages/min), scraped %(items)d items (at %(itemrate)d items/min)"
#: Scrapy's own LogStats line (LOCAL, kept word for word: log readers parse it), then the cluster's
#: figures, counted in words (``1 worker``).
CLUSTER = (
    "; cluster: %(cluster_pages)s (at %(cluster_pagerate)d pages/min), %(cluster_items)s written, %(queued)d queued, "
    "%(workers)s"
)


async def read_cluster(frontier: Frontier) -> tuple[Status, int, int]:
    """The frontier's status (with its depth) and the cluster totals ``pages`` and
    ``items_stored`` of ``<spider>:stats``, sent together. Raises Redis errors."""
    status, (pages, stored) = await asyncio.gather(
        frontier.status(deep=True), frontier.redis.hmget(frontier.keys.stats, "pages", "items_stored")
    )
    return status, int(pages or 0), int(stored or 0)


class ClusterLogStats(LogStats):
    """Scrapy's ``LogStats`` plus the cluster's figures (see the module docstring)."""

    crawler: Crawler

    def __init__(self, stats: StatsCollector, interval: float = 60.0) -> None:
        super().__init__(stats, interval)
        #: ``CLUSTER_LOGSTATS_ENABLED``: the cluster's figures after this worker's.
        self.cluster = False
        self._tasks: set[asyncio.Task[None]] = set()
        #: The cluster's page total of the last line, where its rate starts (None: no line yet).
        self._cluster_prev: int | None = None
        #: The frontier the lines read, made for the crawler's shared client at the first line.
        self._frontier: Frontier | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        o = super().from_crawler(crawler)
        o.crawler = crawler
        o.cluster = read_setting(crawler, "CLUSTER_LOGSTATS_ENABLED")
        return o

    def log(self, spider: Spider) -> None:
        if failed_at_open(self.crawler):
            return  # the crawl stops at start: its one error line says why, no progress to show
        client = optional_shared_redis(self.crawler) if self.cluster else None
        if client is None:
            super().log(spider)
            return
        # LogStats.calculate_stats, which Scrapy 2.11 does not have
        items = self.stats.get_value("item_scraped_count", 0)
        pages = self.stats.get_value("response_received_count", 0)
        local = {
            "pages": pages,
            "pagerate": (pages - self.pagesprev) * self.multiplier,
            "items": items,
            "itemrate": (items - self.itemsprev) * self.multiplier,
        }
        self.pagesprev, self.itemsprev = pages, items
        task = asyncio.get_running_loop().create_task(self._log_cluster(client, spider, local))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _log_cluster(self, client: Any, spider: Spider, local: dict[str, Any]) -> None:
        if self._frontier is None or self._frontier.redis is not client:
            settings = self.crawler.settings
            keys = keys_of(self.crawler)
            self._frontier = Frontier(
                client, keys, node_id_of(self.crawler), start_urls_as_set=settings.getbool("REDIS_START_URLS_AS_SET")
            )
        try:
            status, pages, stored = await read_cluster(self._frontier)
        except _READ_FAILURES as exc:
            if isinstance(exc, AttributeError) and not client_failure(exc):
                raise
            logger.info(
                LOCAL + "; cluster: unavailable (%(error)s)",
                {**local, "error": describe_error(exc)},
                extra={"spider": spider},
            )
            return
        prev, self._cluster_prev = self._cluster_prev, pages
        rate = (pages - prev) * self.multiplier if prev is not None else 0
        cluster = {
            "cluster_pages": plural(pages, "page"),
            "cluster_pagerate": rate,
            "cluster_items": plural(stored, "item"),
            "queued": status.depth,
            "workers": plural(status.nodes, "worker"),
        }
        logger.info(LOCAL + CLUSTER, {**local, **cluster}, extra={"spider": spider})

    def spider_closed(self, spider: Spider, reason: str) -> None:
        for task in list(self._tasks):
            task.cancel()
        super().spider_closed(spider, reason)
