"""Retry with exponential backoff and jitter, honouring ``Retry-After``.

The retry decision, its log lines and the ``retry/*`` stats are Scrapy's own
(:func:`scrapy.downloadermiddlewares.retry.get_retry_request`); this middleware adds when the
retry may be sent. The time is kept in the request's meta (``retry_not_before``, Unix seconds),
so it holds on whichever worker takes the retry from the shared frontier.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import RetryMiddleware, get_retry_request
from scrapy.utils.response import response_status_message

from scrapy_frontier.config import read_setting
from scrapy_frontier.nodes import server_clock
from scrapy_frontier.scheduler.leases import FAILED_META

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: Request meta key: the retry is not sent before this Unix time (seconds).
NOT_BEFORE_META = "retry_not_before"


def parse_retry_after(value: bytes | str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value: delay-seconds or an HTTP-date
    (RFC 9110, section 10.2.3). Returns ``None`` when absent or unreadable; never negative."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def backoff_delay(retry_times: int, base: float, cap: float, rng: random.Random = random._inst) -> float:
    """Full-jitter exponential backoff: uniform in [0.5, 1] x min(cap, base x 2**(retry_times-1)), seconds."""
    return min(cap, base * 2 ** max(0, retry_times - 1)) * rng.uniform(0.5, 1.0)


class BackoffRetryMiddleware(RetryMiddleware):
    """Scrapy's RetryMiddleware with a delay before each retry.

    Settings: ``RETRY_BACKOFF_BASE`` (seconds, default 1), ``RETRY_BACKOFF_MAX`` (seconds,
    default 60), ``RETRY_AFTER_MAX`` (the longest ``Retry-After`` obeyed, seconds, default 300;
    a longer one is capped), plus Scrapy's ``RETRY_*`` settings.
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler.settings)
        self.crawler = crawler
        self.base = read_setting(crawler, "RETRY_BACKOFF_BASE")
        self.cap = read_setting(crawler, "RETRY_BACKOFF_MAX")
        self.retry_after_max = read_setting(crawler, "RETRY_AFTER_MAX")
        # Not-before times travel in the request to whichever worker leases the retry: written
        # and read at the Redis server's time, so two workers' clocks need not agree.
        self.clock = server_clock(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BackoffRetryMiddleware:
        return cls(crawler)

    def _retry(self, request: Request, reason: str | Exception | type[Exception]) -> Request | None:
        """Scrapy's ``get_retry_request`` with this middleware's settings (``RetryMiddleware._retry``
        takes the spider before Scrapy 2.13; ``give_up_log_level`` exists from 2.13)."""
        extra = {}
        if hasattr(self, "give_up_log_level"):
            extra["give_up_log_level"] = request.meta.get("give_up_log_level", self.give_up_log_level)
        return get_retry_request(
            request,
            spider=self.crawler.spider,  # type: ignore[arg-type]
            reason=reason,
            max_retry_times=request.meta.get("max_retry_times", self.max_retry_times),
            priority_adjust=request.meta.get("priority_adjust", self.priority_adjust),
            **extra,
        )

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        not_before = request.meta.get(NOT_BEFORE_META)
        if not_before:
            wait = float(not_before) - self.clock.time()
            if wait > 0:
                await asyncio.sleep(wait)

    # ``spider``: the parameter of Scrapy's signature, optional there and here, so never passed.
    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Request | Response:
        if request.meta.get("dont_retry", False) or response.status not in self.retry_http_codes:
            return response
        retry = self._retry(request, response_status_message(response.status))
        if retry is None:
            request.meta[FAILED_META] = {"reason": "retries_exhausted", "status": response.status}
            return response
        delay = None
        if response.status in (429, 503):
            delay = parse_retry_after(response.headers.get(b"Retry-After"))
            if delay is not None:
                delay = min(delay, self.retry_after_max)
                self.crawler.stats.inc_value("retry/retry_after")
        if delay is None:
            delay = backoff_delay(retry.meta.get("retry_times", 1), self.base, self.cap)
        retry.meta[NOT_BEFORE_META] = self.clock.time() + delay
        return retry

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> Request | Response | None:
        if not isinstance(exception, self.exceptions_to_retry) or request.meta.get("dont_retry", False):
            return None
        retry = self._retry(request, exception)
        if retry is None:
            request.meta[FAILED_META] = {
                "reason": "retries_exhausted",
                "exception": f"{type(exception).__name__}: {exception}"[:500],
            }
            return None
        retry.meta[NOT_BEFORE_META] = self.clock.time() + backoff_delay(
            retry.meta.get("retry_times", 1), self.base, self.cap
        )
        return retry
