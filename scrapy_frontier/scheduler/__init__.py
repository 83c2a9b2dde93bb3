"""The Scrapy scheduler of distributed mode: a thin adapter between Scrapy's engine and the
shared :class:`~scrapy_frontier.frontier.Frontier`.

The engine calls :meth:`FrontierScheduler.enqueue_request` and
:meth:`FrontierScheduler.next_request` synchronously, so neither touches Redis: requests to
queue, leases to acknowledge (:mod:`.leases`) and dead letters collect in local buffers, and one
background task (on the reactor's asyncio loop) flushes them in one Lua call, takes the next
batch of requests under lease and feeds start URLs (:mod:`.start_urls`). The heartbeat, and the
reclaim of dead nodes' leases, run on a thread of their own (:mod:`scrapy_frontier.nodes`). A
lease is acknowledged when Scrapy has finished with its response: the callback ran, its requests
were handed to this scheduler (and are flushed in the same call, before the acknowledgement) and
its items went through every pipeline (the storage pipeline returns only once they are committed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import redis.exceptions
from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.httpobj import urlparse_cached

from scrapy_frontier import scrapy_internals
from scrapy_frontier.config import fail_at_open, failed_at_open, read_setting
from scrapy_frontier.connection import (
    ConfigError,
    describe_error,
    detect_cluster,
    is_cluster,
    redact_url,
    sync_redis,
)
from scrapy_frontier.deadletter import DeadLetters
from scrapy_frontier.dupefilter import (
    CLUSTER_SHARDS,
    DedupConfig,
    DupefilterMismatch,
    fingerprint_int64,
    fingerprinter_id,
    record_shards,
)
from scrapy_frontier.dupefilter import claim as claim_dupefilter
from scrapy_frontier.frontier import START_PREFIX, Entry, Frontier, Lease, mark_ranked, queue_host
from scrapy_frontier.keys import CRAWLS_KEY, Keys, crawl_id_error, register
from scrapy_frontier.nodes import Heartbeat, node_id_of, server_clock
from scrapy_frontier.politeness import sync_rates
from scrapy_frontier.redis_health import OUTAGE_ERRORS, redis_health
from scrapy_frontier.scheduler.leases import FAILED_META, LEASE_META, RETRY_DONT_FILTER_META, LeaseBook
from scrapy_frontier.scheduler.start_urls import StartUrlIntake
from scrapy_frontier.serialize import RequestRefused, request_from_json, request_to_json, without_default_port
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

__all__ = ["FAILED_META", "LEASE_META", "FrontierScheduler"]

logger = logging.getLogger(__name__)

#: What a Redis outage raises (retried with backoff).
_REDIS_ERRORS = OUTAGE_ERRORS
_PUSH_BATCH = 1000
#: Seconds between two checks that Redis holds no lease this worker does not know of.
_RECONCILE_INTERVAL = 30.0
#: Entries each frontier shard's seen feed keeps, about (one per push call, ~60 fingerprints):
#: a few seconds of a busy crawl. A worker that looks less often misses some, which costs it
#: only dedup checks in Redis.
SEEN_FEED_ENTRIES = 500


def _payload_request(payload: str | bytes) -> str:
    """``<METHOD url>`` of a queued request's payload, as Scrapy writes a request in its log."""
    try:
        data = json.loads(payload)
        return f"<{data.get('method', 'GET')} {data['url']}>"
    except (ValueError, TypeError, KeyError):
        return repr(payload[:200])


class FrontierScheduler(BaseScheduler):
    """Scrapy scheduler backed by the shared Redis frontier (settings: docs/settings.md)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.prefetch = read_setting(crawler, "FRONTIER_PREFETCH", int, minimum=0) or settings.getint(
            "CONCURRENT_REQUESTS"
        )
        self.heartbeat_interval = read_setting(crawler, "FRONTIER_HEARTBEAT_INTERVAL", float, above=0)
        self.node_timeout = (
            read_setting(crawler, "FRONTIER_NODE_TIMEOUT", float, minimum=0) or 6 * self.heartbeat_interval
        )
        if self.node_timeout < 2 * self.heartbeat_interval:
            fail_at_open(
                crawler,
                "Setting FRONTIER_NODE_TIMEOUT=%r is out of range: it must be >= %s (twice FRONTIER_HEARTBEAT_INTERVAL)",
                settings.get("FRONTIER_NODE_TIMEOUT"),
                2 * self.heartbeat_interval,
            )
        self.poll_max = read_setting(crawler, "FRONTIER_POLL_MAX", float, above=0)
        self.idle_close = read_setting(crawler, "MAX_IDLE_TIME_BEFORE_CLOSE", float, minimum=0)
        self.persist = read_setting(crawler, "SCHEDULER_PERSIST", bool)
        self.start_batch = read_setting(crawler, "REDIS_START_URLS_BATCH_SIZE", int, minimum=1)
        self.start_max_bytes = read_setting(crawler, "REDIS_START_URLS_MAX_BYTES", int, minimum=1)
        self.start_as_set = read_setting(crawler, "REDIS_START_URLS_AS_SET", bool)
        self.domain_rate = read_setting(crawler, "DOMAIN_RATE_LIMIT", float, minimum=0)
        self.domain_concurrency = read_setting(crawler, "DOMAIN_CONCURRENCY", int, minimum=0)
        self.local_seen_max = read_setting(crawler, "FRONTIER_LOCAL_SEEN", int, minimum=0)
        self.shards_wanted = read_setting(crawler, "FRONTIER_SHARDS", int, minimum=0)
        if self.shards_wanted is not None and self.shards_wanted > 16384:
            fail_at_open(
                crawler,
                "Setting FRONTIER_SHARDS=%r is out of range: at most 16384 (the hash slots of a Redis Cluster)",
                self.shards_wanted,
            )
        self.rates_refresh = read_setting(crawler, "POLITENESS_REFRESH", float, above=0)
        self.wait_replicas_wanted = read_setting(crawler, "FRONTIER_WAIT_REPLICAS", int, minimum=0)
        self.wait_timeout = read_setting(crawler, "FRONTIER_WAIT_TIMEOUT", float, above=0)
        self._wait_short_seen = 0
        self.dupefilter_debug = settings.getbool("DUPEFILTER_DEBUG")
        self._log_duplicates = True
        crawl_error = crawl_id_error(str(settings.get("CRAWL_ID") or "").strip())
        if crawl_error:
            fail_at_open(crawler, "%s", crawl_error)
        if settings.getbool("REDIS_START_URLS_AS_ZSET"):
            fail_at_open(
                crawler,
                "REDIS_START_URLS_AS_ZSET is not supported: start URLs are a list (lpush) or, with REDIS_START_URLS_AS_SET, a set",
            )
        self.dedup: DedupConfig | None
        try:
            self.dedup = DedupConfig.from_settings(settings)
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
            self.dedup = None  # the crawl stops at open; no claim on the dupefilter
        self.node_id = node_id_of(crawler)
        #: Reports Redis outages and a Redis out of memory once for the worker.
        self.health = redis_health(crawler)
        self.spider: Spider | None = None
        self.frontier: Frontier | None = None
        self._local: deque[Request] = deque()
        #: Fingerprints (their first 64 bits, as the packed dupefilter keeps them) this worker has
        #: queued, or learnt from the seen feed that another worker queued (bounded; cleared when
        #: full): a local first look before the shared dupefilter.
        self._seen: set[int] = set()
        #: The count of ``scrapy forget`` calls last seen (the heartbeat reads it).
        self._forgets: bytes | None = None
        self._to_push: list[Entry] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._poll_delay = 0.0
        self._next_poll = 0.0
        self._idle_since: float | None = None
        self._outage_since: float | None = None
        self._last_task_error: str | None = None  # logged once while it repeats
        self._next_reconcile = time.monotonic() + _RECONCILE_INTERVAL
        self._started = time.time()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        return cls(crawler)

    # -- engine interface ---------------------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None]:
        return deferred_from_coro(self._open(spider))

    async def _open(self, spider: Spider) -> None:
        self.spider = spider
        settings = self.crawler.settings
        self.keys = Keys.for_spider(settings, spider.name, type(spider))
        self.leases = LeaseBook(self.keys, self.node_id, self.stats, self.crawler.settings.getint("DOWNLOAD_MAXSIZE"))
        self.intake = StartUrlIntake(spider, self.stats, self.node_id, self.start_max_bytes)
        batch = getattr(type(spider), "redis_batch_size", None)
        if batch:
            self.start_batch = int(batch)
        url = settings.get("REDIS_URL")
        if failed_at_open(self.crawler):
            return  # a setting already stops the crawl: join nothing, write nothing
        try:
            client = await detect_cluster(self.crawler)
            await client.ping()
        except ConfigError as exc:
            fail_at_open(self.crawler, "%s", exc)
            return
        except redis.exceptions.AuthenticationError as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: authentication failed (%s)", redact_url(url), describe_error(exc))
            return
        except (*_REDIS_ERRORS, redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
            return
        if self.dedup is None:
            return
        try:
            found = (await client.type(self.keys.start_urls)).decode()
        except (*_REDIS_ERRORS, redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
            return
        wanted = "set" if self.start_as_set else "list"
        if found not in ("none", wanted):
            setting = (
                "REDIS_START_URLS_AS_SET=True" if wanted == "set" else "REDIS_START_URLS_AS_SET=False (the default)"
            )
            fail_at_open(
                self.crawler,
                "%s is a Redis %s, but with %s start URLs are a %s: set REDIS_START_URLS_AS_SET to match it, or move the key away (redis-cli rename)",
                self.keys.start_urls,
                found,
                setting,
                wanted,
            )
            return
        try:
            claimed = await claim_dupefilter(client, self.keys, self.dedup, self.crawler.request_fingerprinter)
            shards = await record_shards(client, self.keys, self._shards_for(client))
            # the layout the crawl recorded: a scrapy-redis set kept, the packed buckets' count
            meta = {k.decode(): v.decode() for k, v in (await client.hgetall(self.keys.dupefilter_meta)).items()}
            self.dedup = self.dedup.for_stored(meta)
            if "ranked" not in meta:
                ranked = await mark_ranked(client, self.keys.with_shards(shards))
                if ranked:
                    logger.info(
                        "Indexed %s with priorities other than 0, queued by an earlier version", plural(ranked, "host")
                    )
            if claimed:
                logger.info(
                    "Dupefilter %s: layout %s, written by %s",
                    self.keys.dupefilter,
                    self.dedup.layout,
                    fingerprinter_id(self.crawler.request_fingerprinter)[0],
                )
        except DupefilterMismatch as exc:
            fail_at_open(self.crawler, "%s", exc)
            return
        except (*_REDIS_ERRORS, redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            fail_at_open(
                self.crawler,
                "REDIS_URL %s: cannot read the dupefilter %s (%s)",
                redact_url(url),
                self.keys.dupefilter,
                describe_error(exc),
            )
            return
        if not self._shards_agree(client, shards):
            return
        self.keys = self.keys.with_shards(shards)
        register(self.crawler, self.keys)
        if is_cluster(client) or str(url).startswith(("redis+sentinel", "rediss+sentinel")):
            # A failover can lose the last writes without this worker seeing an error (redis-py
            # retries on the new master): a link it queued then must reach the shared dupefilter
            # again when its page is crawled again, not stop at this worker's first look.
            self.local_seen_max = 0
        self.leases = LeaseBook(self.keys, self.node_id, self.stats, self.crawler.settings.getint("DOWNLOAD_MAXSIZE"))
        self.dead = DeadLetters(client, settings.get("DEAD_LETTER_DIR", "."))
        self.frontier = Frontier(
            client,
            self.keys,
            self.node_id,
            start_urls_as_set=self.start_as_set,
            default_rate=self.domain_rate,
            concurrency_cap=self.domain_concurrency,
            dedup=self.dedup,
            wait_replicas=self._wait_replicas_for(client),
            wait_timeout=self.wait_timeout,
            # a recrawl age lets a URL through again: a worker must not skip it on another's word
            seen_feed=SEEN_FEED_ENTRIES if self.local_seen_max and self.dedup.layout != "zset" else 0,
        )
        self._loop = asyncio.get_running_loop()
        self._rates: dict[bytes, bytes] | None = None
        self._next_rates = 0.0
        self.heartbeat = Heartbeat(
            sync_redis(settings),
            self.keys,
            self.node_id,
            interval=self.heartbeat_interval,
            timeout=self.node_timeout,
            start_urls_as_set=self.start_as_set,
            info=self._node_info,
            on_dropped=self._dropped,
            on_reclaimed=self._reclaimed,
            clock=server_clock(self.crawler),
            health=self.health,
        )
        try:
            await asyncio.to_thread(self.heartbeat.beat)
            await asyncio.to_thread(self.heartbeat.reclaim)
        except (*_REDIS_ERRORS, redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
            return
        self.heartbeat.start()
        layout = f", {shards} frontier shards" if shards else ""
        if self.frontier.wait_replicas:
            layout += f", pushes on {self.frontier.wait_replicas} replica(s) before acknowledgements"
        logger.info("Joined the crawl %r on %s%s as node %s", self.keys.crawl, redact_url(url), layout, self.node_id)
        if hasattr(spider, "redis_key") and hasattr(spider, "spider_idle"):
            # A scrapy-redis spider pops its start URLs itself when idle (LRANGE + LTRIM: a
            # worker that dies loses them); here the frontier takes them under lease instead.
            self.crawler.signals.disconnect(spider.spider_idle, signals.spider_idle)
            logger.info(
                "%s: start URLs come from %s through the frontier (scrapy-redis's own reading is off)",
                type(spider).__name__,
                self.keys.start_urls,
            )
        self.crawler.signals.connect(self._record_crawl, signals.spider_opened)
        self.crawler.signals.connect(self._on_idle, signals.spider_idle)
        self.crawler.signals.connect(self._on_spider_error, signals.spider_error)
        scrapy_internals.after_scrape(self.crawler, self.leases.scraped)
        self._task = self._loop.create_task(self._run())

    def _shards_for(self, client: Any) -> int:
        """The shard count a new crawl records: ``FRONTIER_SHARDS``, else none on a single Redis
        and :data:`~scrapy_frontier.dupefilter.CLUSTER_SHARDS` on a Redis Cluster."""
        if self.shards_wanted is not None:
            return self.shards_wanted
        return CLUSTER_SHARDS if is_cluster(client) else 0

    def _wait_replicas_for(self, client: Any) -> int:
        """``FRONTIER_WAIT_REPLICAS``, else 1 on a Redis Cluster whose slot map lists replicas
        (shards on several masters: see Frontier.push), else 0."""
        if self.wait_replicas_wanted is not None:
            return self.wait_replicas_wanted
        return 1 if is_cluster(client) and client.get_replicas() else 0

    def _shards_agree(self, client: Any, shards: int) -> bool:
        """Refuse (at open) a recorded layout this worker cannot use, or one that differs from
        an explicit ``FRONTIER_SHARDS``."""
        if shards == 0 and is_cluster(client):
            fail_at_open(
                self.crawler,
                "The crawl %r was started unsharded on a single Redis (%s:meta shards=0); it cannot go on on a Redis Cluster: "
                "start it over on the cluster (another CRAWL_ID) or keep it on a single Redis",
                self.keys.crawl,
                self.keys.dupefilter,
            )
            return False
        if self.shards_wanted is not None and self.shards_wanted != shards:
            fail_at_open(
                self.crawler,
                "Setting FRONTIER_SHARDS=%s differs from the crawl's recorded layout (%s:meta shards=%s): every worker of a crawl uses the recorded one; "
                "leave FRONTIER_SHARDS unset, or start a new crawl (another CRAWL_ID)",
                self.shards_wanted,
                self.keys.dupefilter,
                shards,
            )
            return False
        return True

    async def _record_crawl(self) -> None:
        """Add this crawl to ``scrapy-frontier:crawls`` once every component has opened without a
        setting stopping the crawl (``scrapy status`` lists the crawls there)."""
        if failed_at_open(self.crawler) or self.frontier is None:
            return
        registry = self.crawler.settings.get("CRAWLS_KEY") or CRAWLS_KEY
        try:
            await self.frontier.redis.sadd(registry, self.keys.crawl)
        except (*_REDIS_ERRORS, redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            logger.warning(
                "Could not record the crawl in %s (%s); scrapy status lists it once a worker can",
                registry,
                describe_error(exc),
            )

    def close(self, reason: str) -> Deferred[None] | None:
        if self.frontier is None:
            return None
        return deferred_from_coro(self._close(reason))

    def has_pending_requests(self) -> bool:
        return bool(self._local)

    def enqueue_request(self, request: Request) -> bool:
        return self._enqueue(request) == "queued"

    def _enqueue(self, request: Request) -> str:
        """Buffer ``request`` for the frontier: ``"queued"``, ``"duplicate"`` (this worker queued
        it already) or ``"refused"`` (it cannot be serialized; logged and counted)."""
        assert self.spider is not None
        replaced = self.leases.replaced(request)
        url = without_default_port(request.url)
        if url != request.url:
            request = request.replace(url=url)
        dedup = not request.dont_filter
        if replaced == "redirect":
            if request.meta.pop(RETRY_DONT_FILTER_META, False):
                # dont_filter came from a retry of the redirecting request, not from the spider
                request.dont_filter = False
                dedup = True
            redirects = [without_default_port(u) for u in request.meta.get("redirect_urls") or ()]
            if dedup and redirects[-1:] == [url] and redirects.count(url) == 1:
                # A page redirecting to itself (to set a cookie, say) is followed once.
                dedup = False
        # The spider's own start requests (Scrapy's start spider middleware marks them) have
        # dont_filter, and every worker yields them: the crawl fetches each page once all the
        # same, as a start request or as a link found in a page, so they are deduplicated too.
        fingerprint = ""
        digest = b""
        seen_key = 0
        if dedup or (request.meta.get("is_start_request") and LEASE_META not in request.meta):
            digest = self.crawler.request_fingerprinter.fingerprint(request)
            seen_key = fingerprint_int64(digest)
            if self.local_seen_max and seen_key in self._seen:
                # This worker queued it already: the shared dupefilter would refuse it too, so
                # spare the serialization and the bytes to Redis.
                self._filtered(request)
                return "duplicate"
            fingerprint = digest.hex()
        try:
            payload = request_to_json(request, self.spider)
        except RequestRefused as exc:
            logger.error("Refused request %s of spider %r: %s", request.url, self.spider.name, exc)
            self.stats.inc_value(f"frontier/refused/{exc.reason}")
            return "refused"
        if digest and self.local_seen_max:
            if len(self._seen) >= self.local_seen_max:
                self._seen.clear()
            self._seen.add(seen_key)
        self._to_push.append(
            Entry(fingerprint, queue_host(urlparse_cached(request).hostname), -request.priority, payload)
        )
        self.stats.inc_value("scheduler/enqueued/redis")
        self._wakeup.set()
        return "queued"

    def _filtered(self, request: Request) -> None:
        """A request dropped as a duplicate: counted, and logged as Scrapy's dupefilter does
        (the first one, or each with ``DUPEFILTER_DEBUG``)."""
        self.stats.inc_value("dupefilter/filtered")
        self._log_filtered(request)

    def _log_filtered(self, request: Request | str) -> None:
        if self.dupefilter_debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request}, extra={"spider": self.spider})
        elif self._log_duplicates:
            msg = "Filtered duplicate request: %(request)s - no more duplicates will be shown (see DUPEFILTER_DEBUG to show all duplicates)"
            logger.debug(msg, {"request": request}, extra={"spider": self.spider})
            self._log_duplicates = False

    def next_request(self) -> Request | None:
        if len(self._local) <= self.prefetch // 2:
            self._wakeup.set()
        if not self._local:
            return None
        self.stats.inc_value("scheduler/dequeued/redis")
        return self._local.popleft()

    def _on_spider_error(self, failure: Failure, response: Any, spider: Spider) -> None:
        self.leases.callback_failed(failure, getattr(response, "request", None))

    # -- the background task ----------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=self._tick())
            except TimeoutError:
                pass
            self._wakeup.clear()
            if self._stopping:
                break
            try:
                await self._step()
                self._last_task_error = None
            except Exception as exc:
                # an outage (redis-py's cluster client failing in its own code during a failover
                # too), or Redis at maxmemory refusing the push or the lease: backoff, one line
                if not self.health.failed(exc):
                    self.stats.inc_value("frontier/task_errors")
                    text = describe_error(exc)
                    if text != self._last_task_error:  # once while the same error repeats
                        self._last_task_error = text
                        if isinstance(exc, redis.exceptions.ResponseError):
                            # a key of the crawl changed type under it (WRONGTYPE), say: Redis's words are the message
                            logger.error(
                                "Redis refused a frontier call (%s); the worker keeps trying every second", text
                            )
                        else:
                            logger.exception("Frontier task error (the worker keeps running)")
                    await asyncio.sleep(1.0)
                    continue
                self._outage()
                await asyncio.sleep(min(5.0, 0.5 * 2 ** min(6, self.stats.get_value("frontier/redis_errors", 0))))

    def _tick(self) -> float:
        if len(self._local) > self.prefetch // 2:
            return 1.0
        return max(0.0, min(self._next_poll - time.monotonic(), 1.0))

    def _refill_due(self) -> bool:
        return len(self._local) <= self.prefetch // 2 and time.monotonic() >= self._next_poll

    async def _step(self) -> None:
        forgets = self.heartbeat.forgets
        if forgets != self._forgets:
            if self._forgets is not None and self._seen:
                # `scrapy forget` let URLs through the dupefilter: this worker must ask Redis again
                self._seen.clear()
                logger.info(
                    "URLs were forgotten (scrapy forget): the local first look is emptied, links are checked in Redis again"
                )
            self._forgets = forgets
        running = self.crawler.engine.running
        to_send = self._to_push or self.leases.to_ack or self.leases.to_fail
        if running and to_send and self._refill_due() and self.frontier.one_call and len(self._to_push) <= _PUSH_BATCH:
            got: int | None = await self._flush_and_refill()
        else:
            await self._flush()
            if not self.crawler.engine.running:
                # The engine is stopping (SIGINT/SIGTERM): give back at once what was not started,
                # rather than once the requests in flight are done.
                await self._give_back_unstarted()
                return
            got = await self._refill() if self._refill_due() else None
        if got is not None:
            if got:
                self._poll_delay = 0.0
                scrapy_internals.wake_engine(self.crawler)
            else:
                self._poll_delay = min(self.poll_max, max(0.05, self._poll_delay * 2))
            delay = self._poll_delay
            due = self.frontier.next_due_in
            if not got and due >= 0:
                # a host is queued but not due yet (politeness): come back when it is
                delay = min(delay, max(0.005, due))
            self._next_poll = time.monotonic() + delay
        if self._outage_since is not None or time.monotonic() >= self._next_reconcile:
            await self._reconcile()
        if self.keys.shards and time.monotonic() >= self._next_rates:
            self._next_rates = time.monotonic() + self.rates_refresh
            self._rates = await sync_rates(self.frontier.redis, self.keys, self._rates)
        await self._check_idle()
        self.health.answered()
        if self._outage_since is not None:
            self._outage_since = None
            self.stats.set_value("frontier/redis_errors", 0)

    async def _reconcile(self) -> None:
        """Give back the leases Redis holds for this node that the node does not know of. A
        script runs even when its reply is lost (the connection drops after Redis executed it,
        or redis-py retries a call that had run): those requests sit under this live node's
        lease, never started, never reclaimed, and the crawl would never end."""
        self._next_reconcile = time.monotonic() + _RECONCILE_INTERVAL
        held = await self.frontier.lease_fields()
        # Read after the await: a lease acknowledged meanwhile moved from the book to to_ack.
        unknown = held - self.leases.fields() - set(self.leases.to_ack)
        if unknown:
            self._seen.clear()  # their acknowledgements were lost: so perhaps their children
            returned = await self.frontier.unlease(sorted(unknown))
            self.stats.inc_value("frontier/orphans_returned", returned)
            logger.warning(
                "Returned %s this node held in Redis without knowing (a reply lost to a Redis error) to the frontier",
                plural(returned, "lease"),
            )

    async def _give_back_unstarted(self) -> None:
        if not self._local:
            return
        fields = [request.meta[LEASE_META] for request in self._local]
        returned = await self.frontier.unlease(fields)
        for field in fields:
            self.leases.forget(field)
        self._local.clear()
        self.stats.inc_value("frontier/released", returned)
        logger.info("Stopping: returned %s not yet started to the frontier", plural(returned, "request"))

    def _outage(self) -> None:
        """A step failed for a Redis outage or a refusal for lack of memory (reported by
        :attr:`health`): back off, and reconcile the leases at each step until one succeeds."""
        self.stats.inc_value("frontier/redis_errors")
        # Writes just before an error may be lost (a failover, a restart without appendfsync
        # always): what this worker queued must be able to be queued again.
        self._seen.clear()
        if self._outage_since is None:
            self._outage_since = time.monotonic()

    async def _flush(self) -> None:
        # Flush what is buffered now; what arrives meanwhile waits for the next round.
        to_ack, to_fail = self.leases.to_ack, self.leases.to_fail
        for _ in range(len(self._to_push) // _PUSH_BATCH + 1):
            entries = self._to_push[:_PUSH_BATCH]
            # Acknowledgements go with the last batch of pushes, never before them.
            last = len(entries) == len(self._to_push)
            acks = to_ack[:] if last else []
            failed = to_fail[:] if last else []
            duplicates: list[Any] | None = [] if entries and (self.dupefilter_debug or self._log_duplicates) else None
            added = await self.frontier.push(entries, acks, failed, duplicates)
            self._pushed(entries, acks, failed, added, duplicates)

    def _pushed(
        self, entries: list[Entry], acks: list[Any], failed: list[str], added: int, duplicates: list[Any] | None
    ) -> None:
        """What a push call that returned ``added`` sent is no longer to send; counted."""
        to_ack, to_fail = self.leases.to_ack, self.leases.to_fail
        if self.frontier.wait_short > self._wait_short_seen:
            if not self._wait_short_seen:
                logger.warning(
                    "WAIT saw fewer than %s within %.1fs; acknowledging anyway (a failover now may lose those pushes)",
                    plural(self.frontier.wait_replicas, "replica"),
                    self.wait_timeout,
                )
            self.stats.inc_value("frontier/replica_wait_short", self.frontier.wait_short - self._wait_short_seen)
            self._wait_short_seen = self.frontier.wait_short
        del self._to_push[: len(entries)]
        del to_ack[: len(acks)]
        del to_fail[: len(failed)]
        if entries:
            self.stats.inc_value("dupefilter/filtered", len(entries) - added)
            for payload in duplicates or ():
                self._log_filtered(_payload_request(payload))
            self.stats.inc_value("frontier/queued", added)
            if added:
                self._next_poll = 0.0

    async def _refill(self) -> int:
        want = self.prefetch - len(self._local)
        leases = await self.frontier.lease(want)
        if not leases:
            await self._feed_start_urls()
            await self._flush()
            leases = await self.frontier.lease(want)
        return self._take(leases)

    async def _flush_and_refill(self) -> int:
        """:meth:`_flush` and :meth:`_refill` in one round trip (Frontier.push_lease, for an
        unsharded frontier and at most one push batch). Returns the requests leased."""
        want = self.prefetch - len(self._local)
        entries, acks, failed = self._to_push[:], self.leases.to_ack[:], self.leases.to_fail[:]
        duplicates: list[Any] | None = [] if entries and (self.dupefilter_debug or self._log_duplicates) else None
        added, leases = await self.frontier.push_lease(entries, acks, failed, duplicates, want)
        # each call's outcome is kept whatever the other's: leases taken are this worker's to
        # crawl, a push made is not to be made again
        got = 0 if isinstance(leases, Exception) else self._take(leases)
        if isinstance(added, Exception):
            raise added
        self._pushed(entries, acks, failed, added, duplicates)
        if isinstance(leases, Exception):
            raise leases
        if not got:
            await self._feed_start_urls()
            await self._flush()
            got = self._take(await self.frontier.lease(want))
        return got

    def _take(self, leases: list[Lease]) -> int:
        """Queue locally the requests of ``leases`` (an unreadable one goes to the dead
        letters); learn the seen feed's news. Returns how many leases."""
        assert self.spider is not None
        for lease in leases:
            try:
                request = request_from_json(lease.payload, self.spider)
            except Exception as exc:
                self.leases.unreadable(lease, exc)
                continue
            self.leases.take(lease, request)
            self._local.append(request)
        self.stats.inc_value("frontier/leased", len(leases))
        if self.frontier.fed:
            self._learn(self.frontier.fed)
            self.frontier.fed = []
        return len(leases)

    def _learn(self, fed: list[bytes]) -> None:
        """Add to the local first look what other workers queued (the seen feed's lists)."""
        packed = self.dedup.layout == "packed"
        seen = self._seen
        learnt = 0
        for blob in fed:
            for item in blob.split(b","):
                if len(seen) >= self.local_seen_max:
                    seen.clear()
                seen.add(int(item) if packed else fingerprint_int64(bytes.fromhex(item[:16].decode())))
                learnt += 1
        self.stats.inc_value("frontier/seen_feed", learnt)

    async def _feed_start_urls(self) -> None:
        raws = await self.frontier.take_start_urls(self.start_batch)
        refused: list[dict[str, Any]] = []
        for raw in raws:
            self.leases.to_ack.append(START_PREFIX + raw)
            requests, record = self.intake.requests(raw)
            if record is not None:
                refused.append(record)
                continue
            for request in requests:
                if self._enqueue(request) == "refused":
                    refused.append(
                        self.intake.refuse(
                            raw, RequestRefused("refused", f"the frontier refused the request for {request.url}")
                        )
                    )
                else:
                    self.stats.inc_value("start_urls/accepted")
        # Kept (one round trip for the batch) before their leases are released by the next flush.
        await self.dead.push(self.keys.start_urls_invalid, refused)

    def _node_info(self) -> dict[str, Any]:
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": int(self._started),
            "pages": self.stats.get_value("response_received_count", 0),
            "items": self.stats.get_value("item_scraped_count", 0),
            "leases": len(self.leases),
        }

    def _dropped(self) -> None:
        # Called on the heartbeat thread: this node had been declared dead and its leases went
        # back to the frontier. Drop, on the reactor thread, what it had not started yet.
        self._loop.call_soon_threadsafe(self._forget_unstarted)

    def _forget_unstarted(self) -> None:
        for request in self._local:
            self.leases.forget(request.meta[LEASE_META])
        self._local.clear()
        self.stats.inc_value("frontier/rejoined")
        logger.warning(
            "This node had been declared dead and its leases reclaimed; rejoining (pages in flight may be fetched twice)"
        )

    def _reclaimed(self, leases: int, nodes: int) -> None:
        self._loop.call_soon_threadsafe(self.stats.inc_value, "frontier/reclaimed", leases)
        # a dead node that held nothing (it stopped between batches) is worth a line, not a warning
        logger.log(
            logging.WARNING if leases else logging.INFO,
            "Reclaimed %s from %s",
            plural(leases, "lease"),
            plural(nodes, "dead node"),
        )

    # -- idle -----------------------------------------------------------------------------

    async def _check_idle(self) -> None:
        if self._local or len(self.leases) or self._to_push or self.leases.to_ack or self.idle_close <= 0:
            self._idle_since = None
            return
        status = await self.frontier.status()
        if not status.idle:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = time.monotonic()
        elif time.monotonic() - self._idle_since >= self.idle_close:
            scrapy_internals.wake_engine(self.crawler)

    def _on_idle(self, spider: Spider) -> None:
        if self.idle_close <= 0 or self._idle_since is None or time.monotonic() - self._idle_since < self.idle_close:
            raise DontCloseSpider

    # -- closing --------------------------------------------------------------------------

    async def _close(self, reason: str) -> None:
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        await asyncio.to_thread(self.heartbeat.stop)
        self.heartbeat.client.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                await self._flush()
                released = await self.frontier.release()
                await self.frontier.leave()
                break
            except Exception as exc:
                if not self.health.failed(exc):
                    raise
                self._outage()
                if time.monotonic() > deadline:
                    logger.error(
                        "Could not return leases to Redis before exiting; other nodes reclaim them after FRONTIER_NODE_TIMEOUT"
                    )
                    return
                await asyncio.sleep(1.0)
        self._local.clear()
        self.leases.clear()
        if released:
            self.stats.inc_value("frontier/released", released)
            logger.info("Returned %s to the frontier", plural(released, "leased request"))
        if not self.persist and reason == "finished":
            status = await self.frontier.status()
            if status.idle and status.nodes == 0:
                await self.frontier.clear()
                await self.frontier.redis.srem(self.crawler.settings.get("CRAWLS_KEY") or CRAWLS_KEY, self.keys.crawl)
                logger.info(
                    "Crawl finished and this was the last node: cleared the frontier and dupefilter (SCHEDULER_PERSIST=False)"
                )
