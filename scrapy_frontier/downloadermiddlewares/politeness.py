"""Shared politeness on the send side (distributed mode): waits for the host's next send time,
and turns 429/503 responses into a cluster-wide slow-down and ``Retry-After`` pause.
The rules and their Redis state: :mod:`scrapy_frontier.politeness`."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from scrapy_frontier.config import fail_at_open, read_setting
from scrapy_frontier.connection import describe_error, optional_shared_redis
from scrapy_frontier.downloadermiddlewares.retry import parse_retry_after
from scrapy_frontier.downloadermiddlewares.robotstxt import ROBOTSTXT_META
from scrapy_frontier.keys import keys_of, queue_host
from scrapy_frontier.politeness import Politeness
from scrapy_frontier.signals import host_limited

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class SharedPolitenessMiddleware:
    """Settings: ``DOMAIN_RATE_LIMIT`` (requests/second per host for the whole crawl, 0 = none),
    ``DOMAIN_RATE_LIMITS`` (``{host: rate}``, seeded into ``<spider>:rates``, which is live),
    ``DOMAIN_CONCURRENCY`` (requests in flight per host across the cluster, 0 = none; enforced
    by the frontier), ``POLITENESS_REFRESH`` (seconds between re-reads of the live rates; a host
    slowed, paused or given a Crawl-delay by another worker is known at once, by pub/sub),
    ``POLITENESS_MIN_FACTOR``, ``POLITENESS_RECOVERY_STEP``, ``POLITENESS_BASE_RATE`` (the rate a
    host without one gets on its first 429/503, requests/second), ``RETRY_AFTER_MAX`` (cap,
    seconds)."""

    def __init__(self, crawler: Crawler) -> None:
        if not crawler.settings.get("REDIS_URL"):
            raise NotConfigured  # embedded mode: one process, Scrapy's own throttling applies
        if not read_setting(crawler, "POLITENESS_ENABLED"):
            raise NotConfigured("POLITENESS_ENABLED is off")
        self.crawler = crawler
        self.stats = crawler.stats
        self.default_rate = read_setting(crawler, "DOMAIN_RATE_LIMIT")
        self.refresh = read_setting(crawler, "POLITENESS_REFRESH")
        self.min_factor = read_setting(crawler, "POLITENESS_MIN_FACTOR")
        self.recovery_step = read_setting(crawler, "POLITENESS_RECOVERY_STEP")
        self.base_rate = read_setting(crawler, "POLITENESS_BASE_RATE")
        self.retry_after_max = read_setting(crawler, "RETRY_AFTER_MAX")
        try:
            self.seed = {str(k): float(v) for k, v in crawler.settings.getdict("DOMAIN_RATE_LIMITS").items()}
            if any(v < 0 for v in self.seed.values()):
                raise ValueError("negative rate")
        except (TypeError, ValueError) as exc:
            fail_at_open(crawler, "Setting DOMAIN_RATE_LIMITS must map hosts to rates >= 0 (requests/second): %s", exc)
            self.seed = {}
        self.politeness: Politeness | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._active: set[str] = set(self.seed)
        self._next_refresh = 0.0
        self._slowed: set[str] = set()
        crawler.signals.connect(self._on_host_limited, host_limited)

    def _on_host_limited(self, host: str) -> None:
        self._active.add(host)

    async def _stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedPolitenessMiddleware:
        return cls(crawler)

    async def _ready(self) -> Politeness | None:
        if self.politeness is None:
            client = optional_shared_redis(self.crawler)
            if client is None:
                return None
            keys = keys_of(self.crawler)
            self.politeness = Politeness(
                client,
                keys,
                default_rate=self.default_rate,
                min_factor=self.min_factor,
                recovery_step=self.recovery_step,
                base_rate=self.base_rate,
            )
            await self.politeness.seed_rates(self.seed)
            self._watcher = asyncio.get_running_loop().create_task(self.politeness.watch(self._on_host_limited))
            self.crawler.signals.connect(self._stop_watching, signals.spider_closed)
        if time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + self.refresh
            self._active = await self.politeness.active_hosts()
        return self.politeness

    async def process_request(self, request: Request) -> None:
        host = queue_host(urlparse_cached(request).hostname)
        try:
            politeness = await self._ready()
            if politeness is None or not (self.default_rate > 0 or host in self._active):
                return
            wait = await politeness.reserve(host)
        except Exception as exc:  # Redis trouble must not stop the crawl; the frontier logs outages
            self.stats.inc_value("politeness/errors")
            logger.debug("Politeness check skipped for %s (%s)", host, describe_error(exc))
            return
        if wait > 0:
            self.stats.inc_value("politeness/delayed")
            # crawler_politeness_wait_seconds_total; Scrapy types the count as int, it adds any number
            self.stats.inc_value("politeness/wait_seconds", wait)  # type: ignore[arg-type]
            await asyncio.sleep(wait)

    async def process_response(self, request: Request, response: Response) -> Any:
        host = queue_host(urlparse_cached(request).hostname)
        politeness = self.politeness
        if politeness is None or request.meta.get(ROBOTSTXT_META):
            return response  # a robots.txt that fails pauses its host on a schedule of its own
        try:
            if response.status in (429, 503):
                pause = parse_retry_after(response.headers.get(b"Retry-After"))
                if pause is not None:
                    pause = min(pause, self.retry_after_max)
                factor = await politeness.slow_down(host, pause)
                self._slowed.add(host)
                self._active.add(host)
                self.stats.inc_value(f"politeness/slowed/{response.status}")
                logger.warning(
                    "Slowing %s down for every worker (HTTP %d): rate x%.2f%s",
                    host,
                    response.status,
                    factor,
                    f", paused {pause:.1f}s (Retry-After)" if pause else "",
                )
            elif host in self._slowed and response.status < 400:
                if await politeness.recover(host) >= 1:
                    self._slowed.discard(host)
                    logger.info("%s is back to its full rate", host)
        except Exception as exc:
            self.stats.inc_value("politeness/errors")
            logger.debug("Politeness update skipped for %s (%s)", host, describe_error(exc))
        return response
