"""Metrics and cluster-wide totals of a worker.

:class:`Observability` (a Scrapy extension, enabled in ``crawler/settings.py``):

- fills the Prometheus metrics of :mod:`scrapy_frontier.observability.metrics` (one registry per crawler) and serves
  them over HTTP on ``METRICS_HOST``:``METRICS_PORT`` (prometheus-client's own server thread);
  the address is logged and recorded in the node registry, field ``metrics`` of
  ``<spider>:nodes:<node>``;
- in distributed mode, every ``METRICS_REFRESH_INTERVAL`` seconds, from the reactor (asyncio
  client), with one pipeline sent together with the frontier's status script
  (:meth:`Frontier.status <scrapy_frontier.frontier.Frontier.status>`, so the key logic stays
  there): adds this worker's counter deltas to the cluster totals ``<spider>:stats``
  (``HINCRBY``), reads the Redis gauges (frontier depth, this worker's leases, dead letters,
  throttled hosts) and re-records the metrics address; once more (the deltas only) on close;
- switches the log to JSON when ``LOG_JSON`` is on and ``scrapy crawl`` has not done it already.

The counters come from Scrapy's signals (``response_received``, ``item_dropped``, the storage
pipeline's ``items_stored``) and from Scrapy stats (``retry/reason_count/<reason>``,
``politeness/wait_seconds``), so they agree with the stats dump at the end of the crawl.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import socket
from typing import TYPE_CHECKING, Any

import redis.exceptions
from prometheus_client import start_http_server
from scrapy import signals
from scrapy.exceptions import CloseSpider

from scrapy_frontier.connection import ConfigError, async_redis, describe_error, node_id_of
from scrapy_frontier.frontier import Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.observability.logjson import env_bool, env_setting, use_json_formatter
from scrapy_frontier.observability.metrics import Metrics
from scrapy_frontier.pipelines.cache import items_stored
from scrapy_frontier.config import CONFIG_ERROR, fail_at_open, read_setting

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

DEFAULT_PORTS = "9410-9429"

#: Cluster totals (fields of ``<spider>:stats``) and the Scrapy stat each one sums. Besides
#: these: ``responses/<status>`` (``downloader/response_status_count/<status>``) and
#: ``politeness_wait_ms`` (``politeness/wait_seconds``, in milliseconds).
TOTALS = {
    "pages": "response_received_count",
    "items_scraped": "item_scraped_count",
    "items_stored": "item_stored_count",
    "items_dropped": "item_dropped_count",
    "retries": "retry/count",
}
_STATUS_STAT = "downloader/response_status_count/"
_RETRY_STAT = "retry/reason_count/"
_WAIT_STAT = "politeness/wait_seconds"

#: KEYS: node info hash. ARGV: field, value. Sets the field only while the node is registered
#: (the heartbeat owns the hash and its TTL; a HSET after it expired would leave it forever).
_SET_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return -1
"""

_REDIS_ERRORS = (redis.exceptions.RedisError, OSError)


def parse_ports(value: Any) -> list[int]:
    """``METRICS_PORT``: a port (``9410``; ``0`` = any free port) or an inclusive range tried
    in order (``"9410-9429"``). Returns the ports to try. Raises ValueError naming the setting."""
    text = str(value).strip()
    match = re.fullmatch(r"(\d{1,5})(?:\s*-\s*(\d{1,5}))?", text)
    if match:
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if match.group(2) is None and first <= 65535:
            return [first]
        if 1 <= first <= last <= 65535:
            return list(range(first, last + 1))
    raise ValueError(f"Setting METRICS_PORT={value!r} is not a port (0-65535, 0 = any free port) or a range like {DEFAULT_PORTS}")


def cluster_counts(stats: dict[str, Any]) -> dict[str, int]:
    """This worker's contribution to the cluster totals, from its Scrapy stats: the fields of
    :data:`TOTALS`, ``responses/<status>`` and ``politeness_wait_ms`` (integers)."""
    counts = {field: int(stats.get(name, 0)) for field, name in TOTALS.items()}
    for name, value in list(stats.items()):
        if name.startswith(_STATUS_STAT):
            counts["responses/" + name[len(_STATUS_STAT) :]] = int(value)
    counts["politeness_wait_ms"] = int(float(stats.get(_WAIT_STAT, 0)) * 1000)
    return counts


def drop_reason(exception: BaseException) -> str:
    """The ``reason`` label of a dropped item: the validation reason (``missing``, ``too_long``
    ...), ``storage_refused``, or else the exception's class name."""
    text = str(exception)
    match = re.match(r"invalid field .*? \((\w+)\):", text)
    if match:
        return match.group(1)
    if text.startswith("the database refused it"):
        return "storage_refused"
    return type(exception).__name__


class PortsBusy(OSError):
    """Every port of ``METRICS_PORT`` is taken."""


def serve(host: str, ports: list[int], registry: CollectorRegistry) -> WSGIServer:
    """Serve ``registry`` on the first free port of ``ports`` (blocking: call it off the reactor).
    Raises :class:`PortsBusy` when all are taken, OSError when ``host`` cannot be bound."""
    for port in ports:
        try:
            server, _ = start_http_server(port, host, registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue
            raise
        return server
    raise PortsBusy(errno.EADDRINUSE, "every port is in use")


def _stop_server(server: WSGIServer) -> None:
    server.shutdown()
    server.server_close()


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
            if env_bool(settings, "LOG_JSON", False) and settings.getbool("LOG_ENABLED"):
                use_json_formatter(crawler)
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
        try:
            self.enabled = env_bool(settings, "METRICS_ENABLED", True)
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
            self.enabled = False
        self.host = str(env_setting(settings, "METRICS_HOST", "127.0.0.1")).strip()
        try:
            self.ports = parse_ports(env_setting(settings, "METRICS_PORT", DEFAULT_PORTS))
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
            self.enabled = False
        if not self.host:
            fail_at_open(crawler, "Setting METRICS_HOST is empty (use 127.0.0.1, or 0.0.0.0 for every interface)")
            self.enabled = False
        self.interval = read_setting(crawler, "METRICS_REFRESH_INTERVAL", float, 5.0, above=0)
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
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._counted: dict[str, float] = {}
        self._pushed: dict[str, int] = {}
        self._failing = False
        self._answered = False
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
            by_status = self._by_status[response.status] = self.metrics.responses.labels(spider=self.spider_name, status=str(response.status))
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
            elif name == _WAIT_STAT:
                counter = self.metrics.politeness_wait_seconds.labels(spider=self.spider_name)
            else:
                continue
            delta = float(value) - self._counted.get(name, 0.0)
            if delta > 0:
                counter.inc(delta)
                self._counted[name] = float(value)

    # -- lifecycle ----------------------------------------------------------------------

    async def spider_opened(self, spider: Spider) -> None:
        if self.enabled:
            await self._serve()
        if self.crawler.settings.get("REDIS_URL"):
            self.keys = Keys.for_spider(self.crawler.settings, spider.name)
            self.node_id = node_id_of(self.crawler)
            try:
                # A client of its own: the shared one closes on spider_closed, while the final
                # totals are being written.
                self.redis = async_redis(self.crawler.settings)
            except ConfigError:
                self.redis = None  # the scheduler reports it and closes the crawl
            else:
                self.frontier = Frontier(self.redis, self.keys, self.node_id, start_urls_as_set=self.start_urls_as_set)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _serve(self) -> None:
        try:
            try:
                self.server = await asyncio.to_thread(serve, self.host, self.ports, self.metrics.registry)
            except PortsBusy:
                self.server = await asyncio.to_thread(serve, self.host, [0], self.metrics.registry)
                which = f"METRICS_PORT {self._ports_text()}" if len(self.ports) == 1 else f"Every port of METRICS_PORT {self._ports_text()}"
                logger.warning("%s is in use on %s; serving metrics on port %d instead (recorded in the node registry)", which, self.host, self.server.server_port)
        except OSError as exc:
            logger.error("Setting METRICS_HOST=%r, METRICS_PORT=%s: cannot serve metrics there (%s)", self.host, self._ports_text(), exc)
            raise CloseSpider(CONFIG_ERROR) from None
        port = self.server.server_port
        shown = socket.gethostname() if self.host in ("0.0.0.0", "::") else self.host
        self.address = f"[{shown}]:{port}" if ":" in shown else f"{shown}:{port}"
        self.stats.set_value("metrics/address", self.address)
        logger.info("Serving Prometheus metrics on http://%s/metrics", self.address)

    def _ports_text(self) -> str:
        return str(self.ports[0]) if len(self.ports) == 1 else f"{self.ports[0]}-{self.ports[-1]}"

    async def _run(self) -> None:
        # Refresh at once (the gauges and the registry's address), then every interval.
        while not self._closing.is_set():
            try:
                await self._refresh()
            except Exception:
                logger.exception("Metrics refresh error (the worker keeps running)")
            try:
                await asyncio.wait_for(self._closing.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    async def spider_closed(self, spider: Spider) -> None:
        self._closing.set()
        if self._task is not None:
            await self._task
        try:
            await self._refresh(final=True)
        finally:
            if self.redis is not None:
                await self.redis.aclose()
                self.redis = None
            if self.server is not None:
                server, self.server = self.server, None
                await asyncio.to_thread(_stop_server, server)

    # -- Redis: totals and gauges -------------------------------------------------------------

    async def _refresh(self, *, final: bool = False) -> None:
        """Sync the stats-based counters; in distributed mode push the totals' deltas and read
        the gauges (one pipeline, sent together with the frontier's status script; on close,
        the deltas only). A Redis error is logged once and retried next time."""
        self._sync_counters()
        if self.redis is None:
            return
        counts = cluster_counts(self.stats.get_stats())
        deltas = {field: value - self._pushed.get(field, 0) for field, value in counts.items() if value != self._pushed.get(field, 0)}
        if final and not deltas:
            return
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for field, delta in deltas.items():
                pipe.hincrby(k.stats, field, delta)
            if not final:
                pipe.hlen(k.leases(self.node_id))
                pipe.llen(k.start_urls_invalid)
                pipe.llen(k.items_invalid)
                pipe.scard(k.limited)
                if self.address:
                    # EVAL, not a registered script: those cost a SCRIPT EXISTS round trip per pipeline.
                    pipe.eval(_SET_IF_EXISTS, 1, k.node_info(self.node_id), "metrics", self.address)
            reads = [pipe.execute(raise_on_error=False)] + ([] if final else [self.frontier.status(deep=True)])
            results, *status = await asyncio.gather(*reads, return_exceptions=True)
        error = next((r for r in (results, *status) if isinstance(r, BaseException)), None)
        if isinstance(error, BaseException) and not isinstance(error, _REDIS_ERRORS):
            raise error
        if not isinstance(results, BaseException):
            for (field, _), result in zip(deltas.items(), results):
                if not isinstance(result, Exception):
                    self._pushed[field] = counts[field]
        if error is not None:
            if final:
                logger.error("Could not add this worker's last counts to %s (%s)", k.stats, describe_error(error))
            elif not self._failing and self._answered and not self._closing.is_set():
                # (at start-up the scheduler reports an unusable Redis and closes the crawl)
                logger.warning("Metrics: cannot reach Redis (%s); totals and gauges are updated when it answers", describe_error(error))
            self._failing = True
            return
        self._answered = True
        if self._failing:
            self._failing = False
            logger.info("Metrics: Redis answers again")
        if final:
            return
        m, spider = self.metrics, self.spider_name
        m.frontier_depth.labels(spider=spider).set(status[0].depth)
        m.dead_letters.labels(spider=spider, kind="requests").set(status[0].failed)
        leases, start_invalid, items_invalid, limited = results[len(deltas) : len(deltas) + 4]
        for gauge, value in (
            (m.leases_inflight.labels(spider=spider), leases),
            (m.throttled_hosts.labels(spider=spider), limited),
            (m.dead_letters.labels(spider=spider, kind="start_urls"), start_invalid),
            (m.dead_letters.labels(spider=spider, kind="items"), items_invalid),
        ):
            if not isinstance(value, Exception):
                gauge.set(value)
