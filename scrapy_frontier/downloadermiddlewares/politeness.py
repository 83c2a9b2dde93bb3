"""Shared politeness on the send side (distributed mode): waits for the send time booked for each
request, and turns 429/503 responses into a cluster-wide slow-down and ``Retry-After`` pause.
The rules and their Redis state: :mod:`scrapy_frontier.politeness`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from scrapy_frontier.config import fail_at_open, failed_at_open, read_setting
from scrapy_frontier.connection import describe_error, optional_shared_redis, stop_listener
from scrapy_frontier.downloadermiddlewares.retry import parse_retry_after
from scrapy_frontier.downloadermiddlewares.robotstxt import ROBOTSTXT_META
from scrapy_frontier.keys import keys_of, queue_host
from scrapy_frontier.politeness import (
    SEND_AT_META,
    Politeness,
    SharedAutoThrottle,
    domain_concurrency,
    domain_rate,
    send_tolerance,
)
from scrapy_frontier.signals import host_limited

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class SendGate:
    """This worker's requests to each of Scrapy's download slots that are past their send time and
    not yet answered, held to the slot's concurrency (``DOWNLOAD_SLOTS``' ``concurrency``, else
    ``CONCURRENT_REQUESTS_PER_DOMAIN``), so that a request never waits in Scrapy's slot queue
    after its send time was booked: it leaves when it is let through. Off (no limit) with
    ``CONCURRENT_REQUESTS_PER_IP``, whose slots are IP addresses."""

    def __init__(self, settings: Any) -> None:
        self.per_domain = (
            0 if settings.getint("CONCURRENT_REQUESTS_PER_IP") else settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
        )
        self.slots = settings.getdict("DOWNLOAD_SLOTS")
        self._held: dict[str, int] = defaultdict(int)
        self._waiting: dict[str, deque[asyncio.Future[None]]] = defaultdict(deque)
        self._holders: dict[int, str] = {}

    def _limit(self, key: str) -> int:
        slot = self.slots.get(key)
        if isinstance(slot, dict) and slot.get("concurrency"):
            return int(slot["concurrency"])
        return self.per_domain

    async def enter(self, request: Request) -> None:
        """Wait until ``request``'s slot has room, and take a place in it."""
        key = request.meta.get("download_slot") or urlparse_cached(request).hostname or ""
        limit = self._limit(key)
        while limit and self._held[key] >= limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting[key].append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiting[key]:
                    self._waiting[key].remove(waiter)
                raise
        self._held[key] += 1
        self._holders[id(request)] = key

    def leave(self, request: Request) -> None:
        """``request`` was answered (or failed): its place goes to the next one waiting."""
        key = self._holders.pop(id(request), None)
        if key is None:
            return
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]
        waiting = self._waiting.get(key)
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break
        if waiting is not None and not waiting:
            del self._waiting[key]


class SharedPolitenessMiddleware:
    """Settings: ``DOMAIN_RATE_LIMIT`` (requests/second per host for the whole crawl, 0 = none),
    ``DOMAIN_RATE_LIMITS`` (``{host: rate}``, seeded into ``<spider>:rates``, which is live),
    ``DOMAIN_CONCURRENCY`` (requests in flight per host across the cluster, 0 = none; enforced
    by the frontier), ``AUTOTHROTTLE_*`` (AutoThrottle for the whole crawl:
    :class:`~scrapy_frontier.politeness.SharedAutoThrottle`), ``POLITENESS_REFRESH`` (seconds
    between re-reads of the live rates; a host slowed, paused or given a Crawl-delay by another
    worker is known at once, by pub/sub),
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
        self.default_rate = domain_rate(crawler)
        self.refresh = read_setting(crawler, "POLITENESS_REFRESH")
        self.min_factor = read_setting(crawler, "POLITENESS_MIN_FACTOR")
        self.recovery_step = read_setting(crawler, "POLITENESS_RECOVERY_STEP")
        self.base_rate = read_setting(crawler, "POLITENESS_BASE_RATE")
        self.retry_after_max = read_setting(crawler, "RETRY_AFTER_MAX")
        self.autothrottle = SharedAutoThrottle.from_crawler(crawler)
        self.gate = SendGate(crawler.settings)
        cap = domain_concurrency(crawler)
        #: The live rates of <spider>:rates that are not a finite number >= 0, as last logged.
        self._bad_rates: dict[str, bytes] = {}
        #: When (time.monotonic()) each host was last slowed down, paused or given a Crawl-delay.
        self._changed: dict[str, float] = {}
        try:
            self.seed = {str(k): float(v) for k, v in crawler.settings.getdict("DOMAIN_RATE_LIMITS").items()}
            if any(not v >= 0 or v == float("inf") for v in self.seed.values()):  # negative, NaN, infinite
                raise ValueError("a rate that is not a finite number >= 0")
        except (TypeError, ValueError) as exc:
            fail_at_open(
                crawler,
                "Setting DOMAIN_RATE_LIMITS=%r must map hosts to finite rates >= 0 (requests/second): %s",
                crawler.settings.get("DOMAIN_RATE_LIMITS"),
                exc,
            )
            self.seed = {}
        self.politeness: Politeness | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._active: set[str] = set(self.seed)
        self._next_refresh = 0.0
        self._slowed: set[str] = set()
        crawler.signals.connect(self._on_host_limited, host_limited)
        self._cap = cap
        self._cookies_shared = crawler.settings.getbool("COOKIES_ENABLED") and read_setting(crawler, "COOKIES_SHARED")
        crawler.signals.connect(self._log_politeness, signals.spider_opened)

    def _log_politeness(self) -> None:
        """The start line that says the crawl's politeness, once the spider is open; none when a
        setting was refused (the crawl stops at open, and defaults stood in for the refused values)."""
        if failed_at_open(self.crawler):
            return
        at, cap = self.autothrottle, self._cap
        logger.info(
            "Politeness for the whole crawl: %s per host (DOMAIN_CONCURRENCY), %s (DOMAIN_RATE_LIMIT), AutoThrottle "
            "%s, cookies %s",
            f"at most {cap} requests in flight" if cap else "no cap on the requests in flight",
            f"at most {self.default_rate:g} requests/second per host" if self.default_rate else "no rate",
            f"on (target {at.target_concurrency:g} in flight, start delay {at.start_delay:g}s, max {at.max_delay:g}s)"
            if at
            else "off",
            "shared (COOKIES_SHARED)" if self._cookies_shared else "each worker's own",
        )

    def _on_host_limited(self, host: str) -> None:
        self._active.add(host)
        self._changed[host] = time.monotonic()

    async def _stop_watching(self) -> None:
        await stop_listener(self._watcher)

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
                autothrottle=self.autothrottle,
            )
            await self.politeness.seed_rates(self.seed)
            self._watcher = asyncio.get_running_loop().create_task(self.politeness.watch(self._on_host_limited))
            self.crawler.signals.connect(self._stop_watching, signals.spider_closed)
        if time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + self.refresh
            self._active, bad = await self.politeness.active_hosts()
            for host, value in bad.items():
                if self._bad_rates.get(host) != value:
                    self.stats.inc_value("politeness/bad_rates")
                    logger.warning(
                        "Live rate of %s in %s is %r, not a number >= 0 (requests/second): ignored, the host has "
                        "DOMAIN_RATE_LIMIT",
                        host,
                        self.politeness.keys.rates,
                        value.decode("utf-8", "replace")[:40],
                    )
            self._bad_rates = bad
        return self.politeness

    async def process_request(self, request: Request, spider: Any = None) -> None:
        """Wait for the send time booked when ``request`` was leased, then for room in its download
        slot (:class:`SendGate`); book a new send time when it is too late for its booking
        (:func:`~scrapy_frontier.politeness.send_tolerance`, a rate other than AutoThrottle's) or
        its host was slowed down or paused since, or when it has no booking and its host has a
        rate (a robots.txt request, a request leased before its host was limited)."""
        host = queue_host(urlparse_cached(request).hostname)
        booked = request.meta.pop(SEND_AT_META, None)
        try:
            politeness = await self._ready()
        except Exception as exc:  # Redis trouble must not stop the crawl; the frontier logs outages
            self.stats.inc_value("politeness/errors")
            logger.debug("Politeness check skipped for %s (%s)", host, describe_error(exc))
            politeness = None
        if booked is not None and self._changed.get(host, -1.0) < booked[3]:
            await self._wait(booked[0] - time.monotonic())
        await self.gate.enter(request)
        try:
            await self._book_again(request, host, booked, politeness)
        except BaseException:  # cancelled (the engine closing) or failed: the place in the slot goes back
            self.gate.leave(request)
            raise

    async def _book_again(
        self, request: Request, host: str, booked: tuple[Any, ...] | None, politeness: Politeness | None
    ) -> None:
        """Book a new send time for ``request`` when its lease-time booking does not hold, and wait for it."""
        if booked is not None and self._changed.get(host, -1.0) < booked[3]:
            when, interval, strict, _ = booked
            if not strict or time.monotonic() - when <= send_tolerance(interval):
                return
            self.stats.inc_value("politeness/rebooked")
        if politeness is None or not (booked is not None or self.default_rate > 0 or host in self._active):
            return
        try:
            wait = await politeness.reserve(host)
        except Exception as exc:  # Redis trouble must not stop the crawl; the frontier logs outages
            self.stats.inc_value("politeness/errors")
            logger.debug("Politeness check skipped for %s (%s)", host, describe_error(exc))
            return
        await self._wait(wait)

    async def _wait(self, wait: float) -> None:
        if wait <= 0:
            return
        self.stats.inc_value("politeness/delayed")
        # crawler_politeness_wait_seconds_total; Scrapy types the count as int, it adds any number
        self.stats.inc_value("politeness/wait_seconds", wait)  # type: ignore[arg-type]
        await asyncio.sleep(wait)

    def process_exception(self, request: Request, exception: Exception, spider: Any = None) -> None:
        self.gate.leave(request)

    async def process_response(self, request: Request, response: Response, spider: Any = None) -> Any:
        self.gate.leave(request)
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
                self._on_host_limited(host)
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
