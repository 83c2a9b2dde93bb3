"""The Scrapy scheduler of distributed mode: a thin adapter between Scrapy's engine and the
shared :class:`~scrapy_frontier.frontier.Frontier`.

The engine calls :meth:`enqueue_request` and :meth:`next_request` synchronously, so neither
touches Redis: requests to queue, leases to acknowledge and dead letters collect in local
buffers, and one background task (on the reactor's asyncio loop) flushes them in one Lua call,
takes the next batch of requests under lease and feeds start URLs. The heartbeat, and the
reclaim of dead nodes' leases, run on a thread of their own (:mod:`scrapy_frontier.nodes`). A lease is acknowledged when Scrapy has finished with its
response: the callback ran, its requests were handed to this scheduler (and are flushed in the
same call, before the acknowledgement) and its items went through every pipeline (the storage
pipeline returns only once they are committed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import redis.exceptions
from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.httpobj import urlparse_cached
from twisted.python.failure import Failure

from scrapy_frontier.deadletter import DeadLetters
from scrapy_frontier.connection import ConfigError, describe_error, node_id_of, redact_url, shared_redis, sync_redis
from scrapy_frontier.dupefilter import DedupConfig, DupefilterMismatch, fingerprinter_id
from scrapy_frontier.dupefilter import claim as claim_dupefilter
from scrapy_frontier.nodes import Heartbeat
from scrapy_frontier.frontier import START_PREFIX, Entry, Frontier, now_ms, slot_of
from scrapy_frontier.keys import Keys
from scrapy_frontier.config import fail_at_open, read_setting
from scrapy_frontier.serialize import RequestRefused, parse_start_payload, request_from_json, request_to_json

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

#: Request meta key: the frontier payload of the lease a request was taken under.
LEASE_META = "_frontier_lease"
#: Request meta key: set by the retry middleware or a callback error, the request failed for good.
FAILED_META = "_frontier_failed"

_REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
_PUSH_BATCH = 1000


@dataclass
class _Lease:
    request: Request
    retry_times: int
    redirect_times: int


class FrontierScheduler(BaseScheduler):
    """Scrapy scheduler backed by the shared Redis frontier (see README for its settings)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.prefetch = read_setting(crawler, "FRONTIER_PREFETCH", int, 0, minimum=0) or settings.getint("CONCURRENT_REQUESTS")
        self.heartbeat_interval = read_setting(crawler, "FRONTIER_HEARTBEAT_INTERVAL", float, 5.0, above=0)
        self.node_timeout = read_setting(crawler, "FRONTIER_NODE_TIMEOUT", float, 6 * self.heartbeat_interval, minimum=2 * self.heartbeat_interval)
        self.poll_max = read_setting(crawler, "FRONTIER_POLL_MAX", float, 1.0, above=0)
        self.idle_close = read_setting(crawler, "MAX_IDLE_TIME_BEFORE_CLOSE", float, 0.0, minimum=0)
        self.persist = read_setting(crawler, "SCHEDULER_PERSIST", bool, False)
        self.start_batch = read_setting(crawler, "REDIS_START_URLS_BATCH_SIZE", int, 100, minimum=1)
        self.start_max_bytes = read_setting(crawler, "REDIS_START_URLS_MAX_BYTES", int, 65536, minimum=1)
        self.start_as_set = read_setting(crawler, "REDIS_START_URLS_AS_SET", bool, False)
        self.domain_rate = read_setting(crawler, "DOMAIN_RATE_LIMIT", float, 0.0, minimum=0)
        self.domain_concurrency = read_setting(crawler, "DOMAIN_CONCURRENCY", int, 0, minimum=0)
        self.local_seen_max = read_setting(crawler, "FRONTIER_LOCAL_SEEN", int, 200_000, minimum=0)
        self.dedup: DedupConfig | None
        try:
            self.dedup = DedupConfig.from_settings(settings)
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
            self.dedup = None  # the crawl stops at open; no claim on the dupefilter
        self.node_id = node_id_of(crawler)
        self.spider: Spider | None = None
        self.frontier: Frontier | None = None
        self._local: deque[Request] = deque()
        #: Fingerprints this worker has queued (bounded; cleared when full): a local first look
        #: before the shared dupefilter.
        self._seen: set[bytes] = set()
        self._leases: dict[bytes, _Lease] = {}
        self._to_push: list[Entry] = []
        self._to_ack: list[bytes] = []
        self._to_fail: list[str] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._poll_delay = 0.0
        self._next_poll = 0.0
        self._idle_since: float | None = None
        self._outage_since: float | None = None
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
        self.keys = Keys.for_spider(settings, spider.name)
        url = settings.get("REDIS_URL")
        try:
            client = shared_redis(self.crawler)
            await client.ping()
        except ConfigError as exc:
            fail_at_open(self.crawler, "%s", exc)
            return
        except redis.exceptions.AuthenticationError as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: authentication failed (%s)", redact_url(url), describe_error(exc))
            return
        except (*_REDIS_ERRORS, redis.exceptions.RedisError) as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
            return
        if self.dedup is None:
            return
        try:
            if await claim_dupefilter(client, self.keys, self.dedup, self.crawler.request_fingerprinter):
                logger.info("Dupefilter %s: layout %s, written by %s", self.keys.dupefilter, self.dedup.layout, fingerprinter_id(self.crawler.request_fingerprinter)[0])
        except DupefilterMismatch as exc:
            fail_at_open(self.crawler, "%s", exc)
            return
        except (*_REDIS_ERRORS, redis.exceptions.RedisError) as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: cannot read the dupefilter %s (%s)", redact_url(url), self.keys.dupefilter, describe_error(exc))
            return
        self.redis = client
        self.dead = DeadLetters(client, settings.get("DEAD_LETTER_DIR", "."))
        self.frontier = Frontier(
            client,
            self.keys,
            self.node_id,
            start_urls_as_set=self.start_as_set,
            default_rate=self.domain_rate,
            concurrency_cap=self.domain_concurrency,
            dedup=self.dedup,
        )
        self._loop = asyncio.get_running_loop()
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
        )
        try:
            await asyncio.to_thread(self.heartbeat.beat)
            await asyncio.to_thread(self.heartbeat.reclaim)
        except (*_REDIS_ERRORS, redis.exceptions.RedisError) as exc:
            fail_at_open(self.crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
            return
        self.heartbeat.start()
        logger.info("Joined the crawl %r on %s as node %s", spider.name, redact_url(url), self.node_id)
        self.crawler.signals.connect(self._on_idle, signals.spider_idle)
        self.crawler.signals.connect(self._on_spider_error, signals.spider_error)
        self._hook_scraper()
        self._task = self._loop.create_task(self._run())

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
        parent = request.meta.get(LEASE_META)
        if parent is not None:
            lease = self._leases.get(parent)
            # A retry or redirect made by a downloader middleware replaces its parent: the
            # parent's response never reaches the scraper, so its lease ends here.
            if lease is not None and lease.request is not request and (
                request.meta.get("retry_times", 0) != lease.retry_times or request.meta.get("redirect_times", 0) != lease.redirect_times
            ):
                del self._leases[parent]
                self._to_ack.append(parent)
                self.stats.inc_value("frontier/acked")
        fingerprint = ""
        if not request.dont_filter:
            digest = self.crawler.request_fingerprinter.fingerprint(request)
            if digest in self._seen:
                # This worker queued it already: the shared dupefilter would refuse it too, so
                # spare the serialization and the bytes to Redis.
                self.stats.inc_value("dupefilter/filtered")
                return "duplicate"
            fingerprint = digest.hex()
        try:
            payload = request_to_json(request, self.spider)
        except RequestRefused as exc:
            logger.error("Refused request %s: %s", request, exc)
            self.stats.inc_value(f"frontier/refused/{exc.reason}")
            return "refused"
        if fingerprint:
            if len(self._seen) >= self.local_seen_max:
                self._seen.clear()
            self._seen.add(digest)
        self._to_push.append(Entry(fingerprint, slot_of(urlparse_cached(request).hostname), -request.priority, payload))
        self.stats.inc_value("scheduler/enqueued/redis")
        self._wakeup.set()
        return "queued"

    def next_request(self) -> Request | None:
        if len(self._local) <= self.prefetch // 2:
            self._wakeup.set()
        if not self._local:
            return None
        self.stats.inc_value("scheduler/dequeued/redis")
        return self._local.popleft()

    # -- lease bookkeeping ----------------------------------------------------------------

    def _hook_scraper(self) -> None:
        # Scrapy has no signal for "the scraper is done with this response" (callback output
        # handled, items through every pipeline). Scraper.enqueue_scrape returns the Deferred
        # that fires exactly then, so wrap it on this crawler's scraper instance.
        scraper = self.crawler.engine.scraper
        enqueue_scrape = scraper.enqueue_scrape

        def wrapped(result: Any, request: Request) -> Any:
            d = enqueue_scrape(result, request)
            d.addBoth(self._scraped, result, request)
            return d

        scraper.enqueue_scrape = wrapped

    def _scraped(self, passthrough: Any, result: Any, request: Request) -> Any:
        payload = request.meta.get(LEASE_META)
        if payload is None or self._leases.pop(payload, None) is None:
            return passthrough
        failed = request.meta.get(FAILED_META)
        if failed is None and isinstance(result, Failure) and not result.check(IgnoreRequest):
            failed = {"reason": "download_error", "exception": f"{result.type.__name__}: {result.getErrorMessage()}"[:500]}
        if failed is not None:
            self._dead_letter(payload, request, failed)
        self._to_ack.append(payload)
        self.stats.inc_value("frontier/acked")
        self._wakeup.set()
        return passthrough

    def _on_spider_error(self, failure: Failure, response: Any, spider: Spider) -> None:
        request = getattr(response, "request", None)
        if request is not None and LEASE_META in request.meta:
            request.meta[FAILED_META] = {"reason": "callback_error", "exception": f"{failure.type.__name__}: {failure.getErrorMessage()}"[:500]}

    def _dead_letter(self, payload: bytes, request: Request, failed: dict[str, Any]) -> None:
        record = {
            **failed,
            "attempts": request.meta.get("retry_times", 0) + 1,
            "url": request.url,
            "failed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "node": self.node_id,
        }
        head = json.dumps(record, ensure_ascii=False)[:-1]
        self._to_fail.append(f'{head},"request":{payload.decode()}}}')
        self.stats.inc_value(f"frontier/failed/{failed['reason']}")
        logger.warning("Request failed for good (%s), kept in %s: %s", failed["reason"], self.keys.failed, request.url)

    # -- the background task ----------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=self._tick())
            except asyncio.TimeoutError:
                pass
            self._wakeup.clear()
            if self._stopping:
                break
            try:
                await self._step()
            except _REDIS_ERRORS as exc:
                self._outage(exc)
                await asyncio.sleep(min(5.0, 0.5 * 2 ** min(6, self.stats.get_value("frontier/redis_errors", 0))))
            except Exception:
                logger.exception("Frontier task error (the worker keeps running)")
                await asyncio.sleep(1.0)

    def _tick(self) -> float:
        if len(self._local) > self.prefetch // 2:
            return 1.0
        return max(0.0, min(self._next_poll - time.monotonic(), 1.0))

    async def _step(self) -> None:
        await self._flush()
        if not self.crawler.engine.running:
            # The engine is stopping (SIGINT/SIGTERM): give back at once what was not started,
            # rather than once the requests in flight are done.
            await self._give_back_unstarted()
            return
        if len(self._local) <= self.prefetch // 2 and time.monotonic() >= self._next_poll:
            got = await self._refill()
            if got:
                self._poll_delay = 0.0
                self._wake_engine()
            else:
                self._poll_delay = min(self.poll_max, max(0.05, self._poll_delay * 2))
            delay = self._poll_delay
            due = self.frontier.next_due_ms
            if not got and due > 0:
                # a host is queued but not due yet (politeness): come back when it is
                delay = min(delay, max(0.005, (due - now_ms()) / 1000))
            self._next_poll = time.monotonic() + delay
        await self._check_idle()
        if self._outage_since is not None:
            logger.warning("Redis is reachable again after %.1fs", time.monotonic() - self._outage_since)
            self._outage_since = None
            self.stats.set_value("frontier/redis_errors", 0)

    async def _give_back_unstarted(self) -> None:
        if not self._local:
            return
        payloads = [request.meta[LEASE_META] for request in self._local]
        returned = await self.frontier.unlease(payloads)
        for payload in payloads:
            self._leases.pop(payload, None)
        self._local.clear()
        self.stats.inc_value("frontier/released", returned)
        logger.info("Stopping: returned %d requests not yet started to the frontier", returned)

    def _outage(self, exc: BaseException) -> None:
        self.stats.inc_value("frontier/redis_errors")
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            self.stats.inc_value("frontier/redis_outages")
            logger.error("Redis unreachable (%s); retrying with backoff, nothing taken is dropped", describe_error(exc))

    async def _flush(self) -> None:
        # Flush what is buffered now; what arrives meanwhile waits for the next round.
        for _ in range(len(self._to_push) // _PUSH_BATCH + 1):
            entries = self._to_push[:_PUSH_BATCH]
            # Acknowledgements go with the last batch of pushes, never before them.
            last = len(entries) == len(self._to_push)
            acks = self._to_ack[:] if last else []
            failed = self._to_fail[:] if last else []
            added = await self.frontier.push(entries, acks, failed)
            del self._to_push[: len(entries)]
            del self._to_ack[: len(acks)]
            del self._to_fail[: len(failed)]
            if entries:
                self.stats.inc_value("dupefilter/filtered", len(entries) - added)
                self.stats.inc_value("frontier/queued", added)
                if added:
                    self._next_poll = 0.0

    async def _refill(self) -> int:
        assert self.spider is not None
        want = self.prefetch - len(self._local)
        payloads = await self.frontier.lease(want)
        if not payloads:
            await self._feed_start_urls()
            await self._flush()
            payloads = await self.frontier.lease(want)
        for payload in payloads:
            try:
                request = request_from_json(payload, self.spider)
            except Exception as exc:
                logger.error("Unreadable request in the frontier, kept in %s: %s", self.keys.failed, exc)
                self._to_fail.append(json.dumps({"reason": "unreadable", "exception": str(exc)[:500], "payload": payload.decode("utf-8", "replace")}))
                self._to_ack.append(payload)
                self.stats.inc_value("frontier/acked")
                self.stats.inc_value("frontier/failed/unreadable")
                continue
            request.meta[LEASE_META] = payload
            self._leases[payload] = _Lease(request, request.meta.get("retry_times", 0), request.meta.get("redirect_times", 0))
            self._local.append(request)
        self.stats.inc_value("frontier/leased", len(payloads))
        return len(payloads)

    async def _feed_start_urls(self) -> None:
        assert self.spider is not None
        raws = await self.frontier.take_start_urls(self.start_batch)
        refused: list[dict[str, Any]] = []
        for raw in raws:
            self._to_ack.append(START_PREFIX + raw)
            try:
                request, unknown = parse_start_payload(raw, self.spider, self.start_max_bytes)
            except RequestRefused as exc:
                refused.append(self._refuse_start(raw, exc))
                continue
            if unknown:
                logger.warning("Start URL payload for %s: ignored unknown keys %s", request.url, ", ".join(map(repr, unknown)))
                self.stats.inc_value("start_urls/unknown_keys")
            outcome = self._enqueue(request)
            if outcome == "refused":
                refused.append(self._refuse_start(raw, RequestRefused("refused", "the frontier refused the request")))
            else:
                self.stats.inc_value("start_urls/accepted")
        # Kept (one round trip for the batch) before their leases are released by the next flush.
        await self.dead.push(self.keys.start_urls_invalid, refused)

    def _refuse_start(self, raw: bytes, exc: RequestRefused) -> dict[str, Any]:
        """Log and count a refused start-URL payload; returns its dead-letter record."""
        shown = raw[:200].decode("utf-8", "replace")
        logger.warning("Refused start URL payload %r (%s): %s", shown, exc.reason, exc)
        self.stats.inc_value(f"start_urls/refused/{exc.reason}")
        return {
            "reason": exc.reason,
            "detail": str(exc),
            "payload": raw[: self.start_max_bytes].decode("utf-8", "replace"),
            "size": len(raw),
            "node": self.node_id,
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def _node_info(self) -> dict[str, Any]:
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": int(self._started),
            "pages": self.stats.get_value("response_received_count", 0),
            "items": self.stats.get_value("item_scraped_count", 0),
            "leases": len(self._leases),
        }

    def _dropped(self) -> None:
        # Called on the heartbeat thread: this node had been declared dead and its leases went
        # back to the frontier. Drop, on the reactor thread, what it had not started yet.
        self._loop.call_soon_threadsafe(self._forget_unstarted)

    def _forget_unstarted(self) -> None:
        for request in self._local:
            self._leases.pop(request.meta[LEASE_META], None)
        self._local.clear()
        self.stats.inc_value("frontier/rejoined")
        logger.warning("This node had been declared dead and its leases reclaimed; rejoining (pages in flight may be fetched twice)")

    def _reclaimed(self, leases: int, nodes: int) -> None:
        self._loop.call_soon_threadsafe(self.stats.inc_value, "frontier/reclaimed", leases)
        logger.warning("Reclaimed %d leases from %d dead node(s)", leases, nodes)

    async def _check_idle(self) -> None:
        if self._local or self._leases or self._to_push or self._to_ack or self.idle_close <= 0:
            self._idle_since = None
            return
        status = await self.frontier.status()
        if not status.idle:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = time.monotonic()
        elif time.monotonic() - self._idle_since >= self.idle_close:
            self._wake_engine()

    def _on_idle(self, spider: Spider) -> None:
        if self.idle_close <= 0 or self._idle_since is None or time.monotonic() - self._idle_since < self.idle_close:
            raise DontCloseSpider

    def _wake_engine(self) -> None:
        # Ask the engine to call next_request() now rather than at its next 5 s heartbeat.
        slot = getattr(self.crawler.engine, "_slot", None)
        if slot is not None:
            slot.nextcall.schedule()

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
            except _REDIS_ERRORS as exc:
                self._outage(exc)
                if time.monotonic() > deadline:
                    logger.error("Could not return leases to Redis before exiting; other nodes reclaim them after FRONTIER_NODE_TIMEOUT")
                    return
                await asyncio.sleep(1.0)
        self._local.clear()
        self._leases.clear()
        if released:
            self.stats.inc_value("frontier/released", released)
            logger.info("Returned %d leased requests to the frontier", released)
        if not self.persist and reason == "finished":
            status = await self.frontier.status()
            if status.idle and status.nodes == 0:
                await self.frontier.clear()
                logger.info("Crawl finished and this was the last node: cleared the frontier and dupefilter (SCHEDULER_PERSIST=False)")
