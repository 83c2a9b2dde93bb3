"""Cookies that follow the host, not the worker: Scrapy's ``CookiesMiddleware`` with its jars
shared by every worker of a crawl (``COOKIES_SHARED``, distributed mode).

Each worker keeps Scrapy's jars (one per ``cookiejar`` meta key, domain and path rules of
``http.cookiejar``, RFC 6265), so a request's ``Cookie`` header costs no Redis call. A response
that sets or deletes cookies (``Set-Cookie``), and a request that brings its own
(``Request.cookies``), change the jar; the change is written to ``<spider>:cookies``
(:attr:`scrapy_frontier.keys.Keys.cookies`) and published on ``<spider>:cookies:@events``
before the response goes on to the spider, so it reaches every other worker's jar before the
links found in that response are queued. A worker that starts (or reconnects) reads the whole
shared jar, leaving out expired cookies.

A cookie larger than :data:`MAX_COOKIE_BYTES` (RFC 6265, section 6.1: at least 4096 bytes a
cookie) or not shareable (a ``cookiejar`` key that is not JSON) stays in the worker's own jar:
logged once, counted in ``cookies/not_shared``. Redis trouble never costs a page: the cookie
stays local (``cookies/errors``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from http.cookiejar import Cookie
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.utils.httpobj import urlparse_cached

from scrapy_frontier.config import read_setting
from scrapy_frontier.connection import describe_error, optional_shared_redis, stop_listener
from scrapy_frontier.keys import keys_of
from scrapy_frontier.scrapy_compat import spider_required

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio import Redis
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.http.cookies import CookieJar
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.keys import Keys

logger = logging.getLogger(__name__)

#: The largest cookie shared (name and value, bytes): RFC 6265, section 6.1.
MAX_COOKIE_BYTES = 4096

#: http.cookiejar.Cookie's arguments, in order: a shared cookie is the JSON list of them.
_COOKIE_ARGS = (
    "version",
    "name",
    "value",
    "port",
    "port_specified",
    "domain",
    "domain_specified",
    "domain_initial_dot",
    "path",
    "path_specified",
    "secure",
    "expires",
    "discard",
    "comment",
    "comment_url",
    "_rest",
    "rfc2109",
)

#: A cookie as the jar holds it: (domain, path, name) -> the cookie.
Snapshot = dict[tuple[str, str, str], Cookie]


def cookie_to_json(cookie: Cookie) -> str:
    return json.dumps([getattr(cookie, arg) for arg in _COOKIE_ARGS], separators=(",", ":"))


def cookie_from_json(data: str | bytes) -> Cookie:
    """The cookie :func:`cookie_to_json` wrote. Raises ``ValueError`` (or ``TypeError``) for
    anything else."""
    args = json.loads(data)
    if not isinstance(args, list) or len(args) != len(_COOKIE_ARGS):
        raise ValueError("not a shared cookie")
    return Cookie(*args)


def _domain_matches(host: str, domain: str) -> bool:
    bare = domain.removeprefix(".")
    return host == bare or host.endswith("." + bare)


def snapshot(jar: CookieJar, host: str) -> Snapshot:
    """The cookies of ``jar`` whose domain ``host`` is in (those a response from it may change)."""
    out: Snapshot = {}
    cookies = jar.jar._cookies  # type: ignore[attr-defined]  # http.cookiejar's own store
    for domain, paths in cookies.items():
        if _domain_matches(host, domain):
            for path, names in paths.items():
                for name, cookie in names.items():
                    out[(domain, path, name)] = cookie
    return out


class SharedCookiesMiddleware(CookiesMiddleware):
    """Scrapy's ``CookiesMiddleware`` (every setting and meta key of it: ``COOKIES_ENABLED``,
    ``COOKIES_DEBUG``, ``cookiejar``, ``dont_merge_cookies``) with the jars shared by the crawl's
    workers when ``REDIS_URL`` and ``COOKIES_SHARED`` are set (see the module docstring)."""

    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        self.shared = False
        self.stats: StatsCollector | None = None
        #: This worker's mark on what it publishes (it skips its own changes).
        self.node = os.urandom(8).hex()
        self.redis: Redis | None = None
        self.client: Redis | None = None
        self.keys: Keys | None = None
        self.watcher: asyncio.Task[None] | None = None
        #: Set once the shared jar was read (or could not be): the first requests wait for it.
        self.loaded: asyncio.Future[None] | None = None
        self.warned: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedCookiesMiddleware:
        mw = super().from_crawler(crawler)
        mw.crawler = crawler  # Scrapy sets it from 2.13
        mw.shared = bool(crawler.settings.get("REDIS_URL")) and bool(read_setting(crawler, "COOKIES_SHARED"))
        mw.stats = crawler.stats
        if mw.shared:
            crawler.signals.connect(mw._stop_watching, signals.spider_closed)
        return mw

    def _count(self, name: str, n: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(name, n)

    async def _ready(self) -> Redis | None:
        """The shared client once the shared jar was read; one watcher however many requests
        ask at once."""
        if self.redis is None:
            if self.loaded is None:
                client = optional_shared_redis(self.crawler)
                if client is None:
                    return None
                self.keys = keys_of(self.crawler)
                self.client = client
                self.loaded = asyncio.get_running_loop().create_future()
                self.watcher = asyncio.get_running_loop().create_task(self._watch(client, self.loaded))
            await asyncio.shield(self.loaded)
            self.redis = self.client
        return self.redis

    async def _stop_watching(self) -> None:
        await stop_listener(self.watcher)

    async def _watch(self, client: Redis, loaded: asyncio.Future[None]) -> None:
        """Subscribe to the other workers' changes, then read the whole shared jar (in that order:
        nothing set meanwhile is missed); apply changes until cancelled. Reconnects, reading the
        jar again."""
        assert self.keys is not None
        while True:
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(self.keys.cookie_events)
                await self._load(client)
                if not loaded.done():
                    loaded.set_result(None)
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._apply(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._count("cookies/errors")
                logger.debug("Shared cookies: %s; reading them again in 1s", describe_error(exc))
                if not loaded.done():
                    loaded.set_result(None)  # the crawl goes on with this worker's own jar
                await asyncio.sleep(1.0)
            finally:
                await pubsub.aclose()

    async def _load(self, client: Redis) -> None:
        assert self.keys is not None
        expired = []
        for field, value in (await client.hgetall(self.keys.cookies)).items():
            try:
                jar_key = json.loads(field)[0]
                cookie = cookie_from_json(value)
            except (ValueError, TypeError, IndexError):
                self._warn_once(
                    "unreadable", "Shared cookies: an unreadable entry in %s is left out", self.keys.cookies
                )
                continue
            if cookie.is_expired():
                expired.append(field)
            else:
                self.jars[jar_key].jar.set_cookie(cookie)
        if expired:
            await client.hdel(self.keys.cookies, *expired)

    def _apply(self, data: bytes) -> None:
        """Another worker's change: ``{"node", "jar", "set": [cookie (as :func:`cookie_to_json`
        writes it), ...], "del": [[domain, path, name], ...]}``."""
        try:
            change = json.loads(data)
            if change.get("node") == self.node:
                return
            jar = self.jars[change["jar"]]
            for value in change.get("set", ()):
                jar.jar.set_cookie(cookie_from_json(value))
            for domain, path, name in change.get("del", ()):
                try:
                    jar.jar.clear(domain, path, name)
                except KeyError:
                    pass
        except (ValueError, TypeError, KeyError) as exc:
            self._warn_once("message", "Shared cookies: a change left out (%s)", exc)

    def _warn_once(self, kind: str, message: str, *args: Any) -> None:
        self._count("cookies/not_shared" if kind in ("large", "jar") else "cookies/errors")
        if kind not in self.warned:
            self.warned.add(kind)
            logger.warning(message + " (further ones: not logged)", *args)

    async def process_request(self, request: Request, spider: Any = None) -> None:  # type: ignore[override]
        if self.shared and self.redis is None:
            try:
                await self._ready()  # the other workers' cookies, before the first request goes
            except Exception as exc:
                self._count("cookies/errors")
                logger.debug("Shared cookies unavailable (%s)", describe_error(exc))
        if not self.shared or not request.cookies or request.meta.get("dont_merge_cookies", False):
            spider_required(super().process_request, self.crawler)(request)
            return
        scrapys = spider_required(super().process_request, self.crawler)
        await self._changing(request, lambda: scrapys(request))

    async def process_response(self, request: Request, response: Response, spider: Any = None) -> Response:  # type: ignore[override]
        if not self.shared or not response.headers.getlist(b"Set-Cookie"):
            return spider_required(super().process_response, self.crawler)(request, response)
        scrapys = spider_required(super().process_response, self.crawler)
        return await self._changing(request, lambda: scrapys(request, response))

    async def _changing(self, request: Request, change: Callable[[], Any]) -> Any:
        """Run ``change()`` (Scrapy's handling of ``request`` or its response), share what it
        changed in the request's jar for the request's host (once the shared jar was read:
        :meth:`process_request`), and return what ``change()`` returned."""
        host = (urlparse_cached(request).hostname or "").lower()
        jar_key = request.meta.get("cookiejar")
        jar = self.jars[jar_key]
        before = snapshot(jar, host)
        result = change()
        redis = self.redis
        if redis is None or self.keys is None:
            return result
        after = snapshot(jar, host)
        try:
            json.dumps(jar_key)
        except (TypeError, ValueError):
            self._warn_once(
                "jar", "Shared cookies: cookiejar key %r is not JSON; its cookies stay in this worker", jar_key
            )
            return result
        set_fields: dict[str, str] = {}
        for place, cookie in after.items():
            value = cookie_to_json(cookie)
            old = before.get(place)
            if old is not None and cookie_to_json(old) == value:
                continue
            if len(cookie.name) + len(cookie.value or "") > MAX_COOKIE_BYTES:
                self._warn_once(
                    "large",
                    "Shared cookies: the cookie named %r of %s is larger than %d bytes; it stays in this worker",
                    cookie.name[:40],
                    host,
                    MAX_COOKIE_BYTES,
                )
                continue
            set_fields[json.dumps([jar_key, *place])] = value
        gone = [list(place) for place in before if place not in after]
        if not set_fields and not gone:
            return result
        try:
            async with redis.pipeline(transaction=False) as pipe:
                if set_fields:
                    # redis-py's mapping type is invariant in its key: only a dict of its whole union fits
                    pipe.hset(self.keys.cookies, mapping=set_fields)  # type: ignore[arg-type]
                if gone:
                    pipe.hdel(self.keys.cookies, *(json.dumps([jar_key, *place]) for place in gone))
                pipe.publish(
                    self.keys.cookie_events,
                    json.dumps({"node": self.node, "jar": jar_key, "set": list(set_fields.values()), "del": gone}),
                )
                await pipe.execute()
            self._count("cookies/shared", len(set_fields) + len(gone))
        except Exception as exc:
            self._count("cookies/errors")
            logger.debug("Shared cookies: %s not shared (%s)", host, describe_error(exc))
        return result
