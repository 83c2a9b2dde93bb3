"""robots.txt fetched once per host for the whole crawl (distributed mode), cached in Redis.

Scrapy's RobotsTxtMiddleware fetches robots.txt once per worker; this subclass first looks in
``<spider>:robots:<netloc>`` (``status``, ``body``; TTL ``ROBOTSTXT_CACHE_TTL`` seconds, default a
day). One worker fetches it under a short lock, the others wait for its copy. The worker that
fetched it records the file's ``Crawl-delay`` (robots.txt, RFC 9309 leaves it undefined; the
common reading: seconds between requests) as the host's shared rate limit, unless a stricter
rate is set. In embedded mode it is Scrapy's middleware, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.http import Request, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler
from twisted.internet.defer import Deferred

from scrapy_frontier.config import read_setting
from scrapy_frontier.connection import describe_error, optional_shared_redis
from scrapy_frontier.keys import keys_of, queue_host
from scrapy_frontier.politeness import Politeness
from scrapy_frontier.redis_health import redis_health
from scrapy_frontier.signals import host_limited

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.robotstxt import RobotParser

logger = logging.getLogger(__name__)

#: Seconds a worker may hold the fetch lock (and others wait for its copy).
LOCK_SECONDS = 30


class SharedRobotsTxtMiddleware(RobotsTxtMiddleware):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.ttl = read_setting(crawler, "ROBOTSTXT_CACHE_TTL")

    async def robot_parser(self, request: Request) -> RobotParser | None:
        client = optional_shared_redis(self.crawler)
        netloc = urlparse_cached(request).netloc
        if client is None or netloc in self._parsers:
            return await super().robot_parser(request)
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
            parser = await super().robot_parser(request)
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
        while True:
            cached = await client.hgetall(key)
            if cached:
                self._stats.inc_value("robotstxt/shared_hit")
                return build_from_crawler(self._parserimpl, self.crawler, cached.get(b"body", b""))
            if await client.set(key + ":lock", b"1", nx=True, ex=LOCK_SECONDS) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        url = urlparse_cached(request)
        robots = Request(
            f"{url.scheme}://{netloc}/robots.txt",
            priority=self.DOWNLOAD_PRIORITY,
            # the request it is for passed the offsite filter (which runs first), dont_filter perhaps
            meta={"dont_obey_robotstxt": True, "allow_offsite": True},
            callback=NO_CALLBACK,
        )
        self._stats.inc_value("robotstxt/request_count")
        try:
            response: Response = await self.crawler.engine.download_async(robots)
        except Exception as exc:
            self._stats.inc_value(f"robotstxt/exception_count/{type(exc)}")
            logger.warning("Could not fetch %s (%s): no robots.txt rules for this host", robots.url, exc)
            await client.delete(key + ":lock")
            return None
        self._stats.inc_value("robotstxt/response_count")
        self._stats.inc_value(f"robotstxt/response_status_count/{response.status}")
        body = response.body if response.status < 500 else b""
        # Not a transaction: the copy and its lock are in two hash slots of a Redis Cluster (the
        # lock expires by itself should the delete not follow).
        async with client.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping={"status": response.status, "body": body})
            pipe.expire(key, self.ttl)
            pipe.delete(key + ":lock")
            await pipe.execute()
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
