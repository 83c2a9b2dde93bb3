"""robots.txt fetched once per host for the whole crawl (distributed mode), cached in Redis.

Scrapy's RobotsTxtMiddleware fetches robots.txt once per worker; this subclass first looks in
``<spider>:robots:<netloc>`` (:func:`cache_fields`; TTL ``ROBOTSTXT_CACHE_TTL`` seconds, default a
day). One worker fetches it under a short lock, the others wait for its copy. What the answer
means follows RFC 9309, section 2.3.1: a 2xx gives the rules (redirects followed, 2.3.1.2), a 4xx
no rules (2.3.1.3); a 5xx or a network error (2.3.1.4) means complete disallow: the host is paused
for every worker (:meth:`Politeness.pause <scrapy_frontier.politeness.Politeness.pause>`), each
page of it that reaches a worker goes back to the frontier, and robots.txt is tried again after
``ROBOTSTXT_RETRY_DELAY`` seconds, doubling up to ``ROBOTSTXT_RETRY_DELAY_MAX``; after
``ROBOTSTXT_UNREACHABLE_LIMIT`` seconds (30 days) of failures the host has no rules. The worker
that fetched it records the file's ``Crawl-delay`` (RFC 9309 leaves it undefined; the common
reading: seconds between requests) as the host's shared rate limit, unless a stricter rate is set.
In embedded mode it is Scrapy's middleware, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

from scrapy_frontier.config import read_setting
from scrapy_frontier.connection import describe_error, optional_shared_redis
from scrapy_frontier.downloadermiddlewares.retry import parse_retry_after
from scrapy_frontier.keys import keys_of, queue_host
from scrapy_frontier.politeness import Politeness
from scrapy_frontier.redis_health import redis_health
from scrapy_frontier.scheduler.leases import RETRY_DONT_FILTER_META
from scrapy_frontier.scrapy_compat import build_from_crawler, download, robots_parser, spider_required
from scrapy_frontier.signals import host_limited

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy.crawler import Crawler
    from scrapy.robotstxt import RobotParser

logger = logging.getLogger(__name__)

#: Seconds a worker may hold the fetch lock (and others wait for its copy).
LOCK_SECONDS = 30
#: Request meta key marking this middleware's own robots.txt requests.
ROBOTSTXT_META = "frontier_robotstxt"


@dataclass(frozen=True)
class RetrySchedule:
    """When a robots.txt that cannot be fetched is tried again (seconds): after ``first``,
    doubling with each failure up to ``longest``; after ``limit`` seconds of failures (RFC 9309,
    section 2.3.1.4: 30 days) it counts as absent, and is fetched again after ``ttl``."""

    first: float
    longest: float
    limit: float
    ttl: float

    def failed(
        self, previous: Mapping[bytes, bytes], status: int, now: float, retry_after: float | None = None
    ) -> tuple[dict[str, Any], int]:
        """The cached state after a failed fetch (``status`` 5xx, or 0 for a network error) at
        Unix time ``now``, ``previous`` being the state before it (empty: none), and its TTL
        (seconds). ``since``: the first failure in a row; ``tries``: the failures in a row;
        ``retry_at``: when it is tried again; ``given_up``: 1 once it counts as absent (the
        rules then are ``body``, empty). ``retry_after`` (a Retry-After, seconds) may push the
        next try later, up to ``longest``."""
        since = float(previous.get(b"since") or now)
        tries = int(previous.get(b"tries") or 0) + 1
        fields: dict[str, Any] = {"status": status, "body": b"", "since": since, "tries": tries}
        if now - since >= self.limit:
            fields.update(retry_at=now + self.ttl, given_up=1)
        else:
            wait = min(self.longest, self.first * 2 ** min(tries - 1, 30))
            fields["retry_at"] = now + max(wait, min(retry_after or 0, self.longest))
        return fields, int(self.limit + self.ttl + self.longest)


def cached_verdict(cached: Mapping[bytes, bytes], now: float) -> tuple[str, float]:
    """What a cached robots.txt state says at Unix time ``now``: ``("rules", 0)`` (its ``body``
    holds the rules), ``("held", retry_at)`` (unreachable: no page of the host until then) or
    ``("due", 0)`` (unreachable and due to be tried again)."""
    retry_at = float(cached.get(b"retry_at") or 0)
    if not retry_at or (cached.get(b"given_up") and now < retry_at):
        return "rules", 0.0
    if now < retry_at:
        return "held", retry_at
    return "due", 0.0


class SharedRobotsTxtMiddleware(RobotsTxtMiddleware):
    """Settings: ``ROBOTSTXT_CACHE_TTL``, ``ROBOTSTXT_RETRY_DELAY``, ``ROBOTSTXT_RETRY_DELAY_MAX``,
    ``ROBOTSTXT_UNREACHABLE_LIMIT`` (seconds), and Scrapy's ``ROBOTSTXT_*``."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._stats = crawler.stats  # Scrapy's own from 2.19
        self.ttl = read_setting(crawler, "ROBOTSTXT_CACHE_TTL")
        self.schedule = RetrySchedule(
            first=read_setting(crawler, "ROBOTSTXT_RETRY_DELAY"),
            longest=read_setting(crawler, "ROBOTSTXT_RETRY_DELAY_MAX"),
            limit=read_setting(crawler, "ROBOTSTXT_UNREACHABLE_LIMIT"),
            ttl=self.ttl,
        )
        #: netloc -> Unix time until which its robots.txt is unreachable (its pages go back)
        self._held: dict[str, float] = {}

    async def process_request(self, request: Request, spider: Any = None) -> Request | None:  # type: ignore[override]
        if request.meta.get("dont_obey_robotstxt") or request.url.startswith(("data:", "file:")):
            return None
        netloc = urlparse_cached(request).netloc
        if not self._is_held(netloc):
            parser = await self.robot_parser(request)
            if not self._is_held(netloc):
                spider_required(self.process_request_2, self.crawler)(parser, request)
                return None
        # robots.txt unreachable: the page goes back to the frontier, where the host is paused
        self._stats.inc_value("robotstxt/held_back")
        again = request.replace(dont_filter=True)
        if not request.dont_filter:
            again.meta[RETRY_DONT_FILTER_META] = True  # a redirect of it is deduplicated again
        return again

    def _is_held(self, netloc: str) -> bool:
        """Whether ``netloc``'s pages wait for its robots.txt; once the wait is over, the next
        request looks at the shared copy again."""
        until = self._held.get(netloc)
        if until is None:
            return False
        if time.time() < until:
            return True
        del self._held[netloc]
        if self._parsers.get(netloc, 0) is None:
            del self._parsers[netloc]
        return False

    async def robot_parser(self, request: Request) -> RobotParser | None:
        client = optional_shared_redis(self.crawler)
        netloc = urlparse_cached(request).netloc
        if client is None or netloc in self._parsers:
            return await robots_parser(self, request)
        waiting: Deferred[RobotParser | None] = Deferred()
        self._parsers[netloc] = waiting
        try:
            parser = await self._shared_parser(client, request, netloc)
        except Exception as exc:  # Redis trouble: fetch it ourselves, as Scrapy would
            if not redis_health(self.crawler).failed(exc):  # an outage is reported once for the worker
                logger.warning(
                    "Shared robots.txt cache unavailable for %s (%s); fetching it here", netloc, describe_error(exc)
                )
            del self._parsers[netloc]
            parser = await robots_parser(self, request)
            if not waiting.called:
                waiting.callback(parser)
            return parser
        self._parsers[netloc] = parser
        waiting.callback(parser)
        return parser

    async def _shared_parser(self, client: Any, request: Request, netloc: str) -> RobotParser | None:
        keys = keys_of(self.crawler)
        key = keys.robots(netloc)
        deadline = time.monotonic() + LOCK_SECONDS
        previous: dict[bytes, bytes] = {}
        while True:
            cached = await client.hgetall(key)
            if cached:
                verdict, retry_at = cached_verdict(cached, time.time())
                if verdict == "rules":
                    self._stats.inc_value("robotstxt/shared_hit")
                    return build_from_crawler(self._parserimpl, self.crawler, cached.get(b"body", b""))
                if verdict == "held":
                    self._held[netloc] = retry_at
                    return None
                previous = cached
            if await client.set(key + ":lock", b"1", nx=True, ex=LOCK_SECONDS) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        url = urlparse_cached(request)
        robots = Request(
            f"{url.scheme}://{netloc}/robots.txt",
            priority=self.DOWNLOAD_PRIORITY,
            # the request it is for passed the offsite filter (which runs first), dont_filter perhaps;
            # a failure is tried again on this middleware's schedule, not by the retry middleware
            meta={"dont_obey_robotstxt": True, "allow_offsite": True, "dont_retry": True, ROBOTSTXT_META: True},
            callback=NO_CALLBACK,
        )
        self._stats.inc_value("robotstxt/request_count")
        try:
            response: Response = await download(self.crawler, robots)
        except IgnoreRequest as exc:  # a downloader middleware's choice, or too many redirects (2.3.1.2)
            logger.warning("Could not fetch %s (%s): no robots.txt rules for this host", robots.url, exc)
            await client.delete(key + ":lock")
            return None
        except Exception as exc:  # a network error or a timeout: unreachable (RFC 9309, 2.3.1.4)
            self._stats.inc_value(f"robotstxt/exception_count/{type(exc)}")
            await self._unreachable(client, keys, request, netloc, previous, 0, str(exc) or type(exc).__name__)
            return None
        self._stats.inc_value("robotstxt/response_count")
        self._stats.inc_value(f"robotstxt/response_status_count/{response.status}")
        if response.status >= 500:
            retry_after = parse_retry_after(response.headers.get(b"Retry-After"))
            await self._unreachable(
                client, keys, request, netloc, previous, response.status, f"HTTP {response.status}", retry_after
            )
            return None
        # 2xx: the rules; any other status (4xx, a redirect without a target) means no rules
        body = response.body if 200 <= response.status < 300 else b""
        # Not a transaction: the copy and its lock are in two hash slots of a Redis Cluster (the
        # lock expires by itself should the delete not follow).
        async with client.pipeline(transaction=False) as pipe:
            pipe.delete(key)
            pipe.hset(key, mapping={"status": response.status, "body": body})
            pipe.expire(key, self.ttl)
            pipe.delete(key + ":lock")
            await pipe.execute()
        if previous.get(b"since") and not previous.get(b"given_up"):
            self._stats.inc_value("robotstxt/reachable_again")
            logger.info(
                "robots.txt of %s answers again (HTTP %d) after %.0fs: its pages are fetched by its rules",
                netloc,
                response.status,
                time.time() - float(previous[b"since"]),
            )
        parser = build_from_crawler(self._parserimpl, self.crawler, body)
        delay = self._crawl_delay(parser)
        if delay:
            host = queue_host(url.hostname)
            await Politeness(client, keys).set_robots_delay(host, delay)
            self.crawler.signals.send_catch_log(host_limited, host=host)
            self._stats.set_value(f"politeness/robots_delay/{host}", delay)
            logger.info(
                "robots.txt of %s asks for Crawl-delay %.1fs: every worker together now sends at most one request "
                "each %.1fs",
                host,
                delay,
                delay,
            )
        return parser

    async def _unreachable(
        self,
        client: Any,
        keys: Any,
        request: Request,
        netloc: str,
        previous: Mapping[bytes, bytes],
        status: int,
        reason: str,
        retry_after: float | None = None,
    ) -> None:
        """robots.txt of ``netloc`` could not be fetched (``status`` 5xx, 0 for a network error):
        record it for every worker, pause the host until the next try, hold its pages here."""
        now = time.time()
        fields, ttl = self.schedule.failed(previous, status, now, retry_after)
        key = keys.robots(netloc)
        async with client.pipeline(transaction=False) as pipe:
            pipe.delete(key)
            pipe.hset(key, mapping=fields)
            pipe.expire(key, ttl)
            pipe.delete(key + ":lock")
            await pipe.execute()
        if fields.get("given_up"):
            if not previous.get(b"given_up"):
                self._stats.inc_value("robotstxt/unreachable_given_up")
                logger.warning(
                    "robots.txt of %s unreachable for %.0f days (%s): its pages are fetched with no rules "
                    "(RFC 9309, 2.3.1.4)",
                    netloc,
                    (now - fields["since"]) / 86_400,
                    reason,
                )
            return None
        retry_at = fields["retry_at"]
        self._held[netloc] = retry_at
        host = queue_host(urlparse_cached(request).hostname)
        await Politeness(client, keys).pause(host, retry_at - now)
        if fields["tries"] == 1:
            self._stats.inc_value("robotstxt/unreachable")
            logger.warning(
                "robots.txt of %s unreachable (%s): no page of it is fetched until it answers (RFC 9309, 2.3.1.4); "
                "tried again in %gs, then less and less often",
                netloc,
                reason,
                round(retry_at - now, 1),
            )
        else:
            self._stats.inc_value("robotstxt/unreachable_retries")
            logger.debug(
                "robots.txt of %s still unreachable (%s): tried again in %gs", netloc, reason, round(retry_at - now, 1)
            )
        return None

    def _crawl_delay(self, parser: Any) -> float | None:
        crawl_delay = getattr(parser, "crawl_delay", None)
        if crawl_delay is None:
            return None
        useragent = self._robotstxt_useragent or self._default_useragent
        try:
            delay = crawl_delay(useragent)
        except Exception:
            return None
        return float(delay) if delay and delay > 0 else None
