"""The observability extension of a worker: metrics, cluster-wide totals, JSON logs.

:class:`Observability` (a Scrapy extension, enabled in ``crawler/settings.py``):

- fills the Prometheus metrics of :mod:`scrapy_frontier.observability.metrics` (one registry per
  crawler) and serves them over HTTP on ``METRICS_HOST``:``METRICS_PORT``
  (:mod:`scrapy_frontier.observability.server`); the address is logged and recorded in the node
  registry, field ``metrics`` of ``<spider>:nodes:<node>``;
- in distributed mode, every ``METRICS_REFRESH_INTERVAL`` seconds, from the reactor (asyncio
  client), in one round trip (:mod:`scrapy_frontier.observability.totals`): adds this worker's
  counter deltas to the cluster totals ``<spider>:stats``, reads the Redis gauges (frontier
  depth, this worker's leases, dead letters, throttled hosts) and re-records the metrics
  address; once more (the deltas only) on close;
- switches the log to JSON when ``LOG_JSON`` is on and ``scrapy crawl`` has not done it already.

The counters come from Scrapy's signals (``response_received``, ``item_dropped``, the storage
pipeline's ``items_stored``) and from Scrapy stats (``retry/reason_count/<reason>``,
``politeness/wait_seconds``), so they agree with the stats dump at the end of the crawl.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider

from scrapy_frontier.config import CONFIG_ERROR, fail_at_open, failed_at_open, read_setting, read_value
from scrapy_frontier.connection import REDIS_FAILURES, ConfigError, async_redis, ready
from scrapy_frontier.keys import keys_of
from scrapy_frontier.nodes import node_id_of
from scrapy_frontier.observability.logjson import use_json_formatter
from scrapy_frontier.observability.metrics import Metrics, drop_reason
from scrapy_frontier.observability.server import (
    parse_ports,
    ports_text,
    server_address,
    start_server,
    stop_server,
)
from scrapy_frontier.observability.totals import WAIT_STAT, ClusterTotals, Gauges
from scrapy_frontier.politeness import domain_concurrency, domain_rate
from scrapy_frontier.redis_health import redis_health
from scrapy_frontier.signals import items_stored

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

_RETRY_STAT = "retry/reason_count/"
#: The revisit stats (scrapy_frontier.revisit) that crawler_revisits_total counts, by its label.
_REVISIT_STATS = {
    "revisit/changed": "changed",
    "revisit/unchanged": "unchanged",
    "revisit/not_modified": "not_modified",
}


class Observability:
    """See the module docstring. Settings (README, "Logs and metrics"): ``METRICS_ENABLED``,
    ``METRICS_HOST``, ``METRICS_PORT`` (each also read from the environment variable of the same
    name), ``METRICS_REFRESH_INTERVAL`` (seconds), ``STATS_KEY``, ``LOG_JSON``."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        settings = crawler.settings
        self.spider_name = crawler.spidercls.name
        try:
            if read_value(settings, "LOG_JSON") and settings.getbool("LOG_ENABLED"):
                use_json_formatter(crawler)
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
        try:
            self.enabled = read_value(settings, "METRICS_ENABLED")
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
            self.enabled = False
        self.host = read_value(settings, "METRICS_HOST")
        try:
            self.ports = parse_ports(read_value(settings, "METRICS_PORT"))
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
            self.enabled = False
        if not self.host:
            fail_at_open(crawler, "Setting METRICS_HOST is empty (use 127.0.0.1, or 0.0.0.0 for every interface)")
            self.enabled = False
        self.interval = read_setting(crawler, "METRICS_REFRESH_INTERVAL")
        self.start_urls_as_set = settings.getbool("REDIS_START_URLS_AS_SET")
        self.metrics = Metrics()
        # the labelled children updated per response, looked up once
        self._pages = self.metrics.pages.labels(spider=self.spider_name)
        self._latency = self.metrics.download_latency_seconds.labels(spider=self.spider_name)
        self._by_status: dict[int, Any] = {}
        self.server: WSGIServer | None = None
        #: ``host:port`` recorded in the node registry, once the server listens.
        self.address: str | None = None
        self.redis: Any = None
        #: The totals and gauges in Redis (distributed mode, once the spider is open).
        self.cluster: ClusterTotals | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._counted: dict[str, float] = {}
        crawler.signals.connect(self.spider_opened, signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signals.spider_closed)
        crawler.signals.connect(self.response_received, signals.response_received)
        crawler.signals.connect(self.item_dropped, signals.item_dropped)
        crawler.signals.connect(self.items_stored, items_stored)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Observability:
        return cls(crawler)

    # -- counters ---------------------------------------------------------------------

    def response_received(self, response: Response, request: Request) -> None:
        self._pages.inc()
        by_status = self._by_status.get(response.status)
        if by_status is None:
            by_status = self._by_status[response.status] = self.metrics.responses.labels(
                spider=self.spider_name, status=str(response.status)
            )
        by_status.inc()
        latency = request.meta.get("download_latency")
        if isinstance(latency, (int, float)):
            self._latency.observe(latency)

    def items_stored(self, items: list[Any]) -> None:
        if items:
            self.metrics.items_stored.labels(spider=self.spider_name).inc(len(items))
            self.stats.inc_value("item_stored_count", len(items))

    def item_dropped(self, item: Any, exception: BaseException) -> None:
        self.metrics.items_dropped.labels(spider=self.spider_name, reason=drop_reason(exception)[:64]).inc()

    def _sync_counters(self) -> None:
        """Counters kept in Scrapy stats: add what they grew by since the last call."""
        for name, value in list(self.stats.get_stats().items()):
            if name.startswith(_RETRY_STAT):
                counter = self.metrics.retries.labels(spider=self.spider_name, reason=name[len(_RETRY_STAT) :][:120])
            elif name == WAIT_STAT:
                counter = self.metrics.politeness_wait_seconds.labels(spider=self.spider_name)
            elif name in _REVISIT_STATS:
                counter = self.metrics.revisits.labels(spider=self.spider_name, result=_REVISIT_STATS[name])
            else:
                continue
            delta = float(value) - self._counted.get(name, 0.0)
            if delta > 0:
                counter.inc(delta)
                self._counted[name] = float(value)

    # -- lifecycle ----------------------------------------------------------------------

    async def spider_opened(self, spider: Spider) -> None:
        if failed_at_open(self.crawler):
            return  # the crawl stops at start (its one error line is logged): nothing to serve
        if self.enabled:
            await self._serve()
        if self.crawler.settings.get("REDIS_URL"):
            keys = keys_of(self.crawler)
            try:
                # A client of its own: the shared one closes on spider_closed, while the final
                # totals are being written.
                self.redis = async_redis(self.crawler.settings)
            except ConfigError:
                self.redis = None  # the scheduler reports it and closes the crawl
            else:
                with contextlib.suppress(*REDIS_FAILURES):
                    await ready(self.redis)  # unreachable: the scheduler reports it
                self.cluster = ClusterTotals(
                    self.redis,
                    keys,
                    node_id_of(self.crawler),
                    start_urls_as_set=self.start_urls_as_set,
                    health=redis_health(self.crawler),
                    default_rate=domain_rate(self.crawler),
                    concurrency_cap=domain_concurrency(self.crawler),
                )
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _serve(self) -> None:
        ports = ports_text(self.ports)
        try:
            server, moved = await asyncio.to_thread(start_server, self.host, self.ports, self.metrics.registry)
        except OSError as exc:
            logger.error(
                "Setting METRICS_HOST=%r, METRICS_PORT=%s: cannot serve metrics there (%s)", self.host, ports, exc
            )
            raise CloseSpider(CONFIG_ERROR) from None
        if moved:
            which = f"METRICS_PORT {ports}" if len(self.ports) == 1 else f"Every port of METRICS_PORT {ports}"
            logger.warning(
                "%s is in use on %s; serving metrics on port %d instead (recorded in the node registry)",
                which,
                self.host,
                server.server_port,
            )
        self.server = server
        self.address = server_address(self.host, server.server_port)
        self.stats.set_value("metrics/address", self.address)
        logger.info("Serving Prometheus metrics on http://%s/metrics", self.address)

    async def _run(self) -> None:
        # Refresh at once (the gauges and the registry's address), then every interval.
        while not self._closing.is_set():
            try:
                await self._refresh()
            except Exception:
                logger.exception("Metrics refresh error (the worker keeps running)")
            try:
                await asyncio.wait_for(self._closing.wait(), self.interval)
            except TimeoutError:
                pass

    async def spider_closed(self, spider: Spider) -> None:
        self._closing.set()
        if self.cluster is not None:
            self.cluster.quiet = True
        if self._task is not None:
            await self._task
        try:
            await self._refresh(final=True)
        finally:
            if self.redis is not None:
                self.cluster = None
                await self.redis.aclose()
                self.redis = None
            if self.server is not None:
                server, self.server = self.server, None
                await asyncio.to_thread(stop_server, server)

    # -- Redis: totals and gauges -------------------------------------------------------------

    async def _refresh(self, *, final: bool = False) -> None:
        """Sync the stats-based counters; in distributed mode push the totals' deltas and read
        the gauges (on close, the deltas only)."""
        self._sync_counters()
        if self.cluster is None:
            return
        gauges = await self.cluster.refresh(self.stats.get_stats(), address=self.address, final=final)
        if gauges is not None:
            self._set_gauges(gauges)

    def _set_gauges(self, gauges: Gauges) -> None:
        m, spider = self.metrics, self.spider_name
        for gauge, value in (
            (m.frontier_depth.labels(spider=spider), gauges.frontier_depth),
            (m.dead_letters.labels(spider=spider, kind="requests"), gauges.failed_requests),
            (m.leases_inflight.labels(spider=spider), gauges.leases),
            (m.throttled_hosts.labels(spider=spider), gauges.throttled_hosts),
            (m.dead_letters.labels(spider=spider, kind="start_urls"), gauges.start_urls_invalid),
            (m.dead_letters.labels(spider=spider, kind="items"), gauges.items_invalid),
            (m.revisits_scheduled.labels(spider=spider), gauges.revisits_scheduled),
            (m.revisits_due.labels(spider=spider), gauges.revisits_due),
            (m.revisits_overdue_seconds.labels(spider=spider), gauges.revisits_overdue_seconds),
        ):
            if value is not None:
                gauge.set(value)
        # the busy hosts of this refresh only: a host no longer busy leaves the series
        for metric in (m.host_in_flight, m.host_delay_seconds, m.host_latency_seconds, m.host_held_back):
            metric.clear()
        for host in gauges.busy_hosts:
            name = host["host"]
            m.host_in_flight.labels(spider=spider, host=name).set(host["in_flight"])
            m.host_delay_seconds.labels(spider=spider, host=name).set(host["delay_s"])
            if host["latency_s"] is not None:
                m.host_latency_seconds.labels(spider=spider, host=name).set(host["latency_s"])
            for reason in host["held_back_by"]:
                m.host_held_back.labels(spider=spider, host=name, reason=reason).set(1)
