"""The scheduler's loop: the local buffers the engine reads and writes synchronously, and the
background task (on the reactor's asyncio loop) that flushes them to the frontier and refills them.

Requests to queue, leases to acknowledge (:mod:`.leases`) and dead letters collect in local
buffers; one task flushes them in one Lua call, takes the next batch of requests under lease and
feeds start URLs (:mod:`.start_urls`). A lease is acknowledged when Scrapy has finished with its
response: the callback ran, its requests were handed to the scheduler (and are flushed in the same
call, before the acknowledgement) and its items went through every pipeline (the storage pipeline
returns only once they are committed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import time
from typing import TYPE_CHECKING, Any

import redis.exceptions
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.httpobj import urlparse_cached

from scrapy_frontier import scrapy_internals
from scrapy_frontier.config import STATE_LOST
from scrapy_frontier.connection import REDIS_FAILURES, describe_error
from scrapy_frontier.dupefilter import fingerprint_int64, start_fingerprint
from scrapy_frontier.frontier import Entry, Lease
from scrapy_frontier.keys import queue_host
from scrapy_frontier.payload import START_PREFIX, lease_host
from scrapy_frontier.politeness import SEND_AT_META, LatencySamples, moves_pace, sync_rates
from scrapy_frontier.redis_health import OUT_OF_MEMORY
from scrapy_frontier.revisit import REVISIT_IN_META, REVISIT_META, STATE_MARK, add_validators, schedule_args
from scrapy_frontier.scheduler.buffer import SendBuffer
from scrapy_frontier.scheduler.leases import LEASE_META, RETRY_DONT_FILTER_META, LeaseBook
from scrapy_frontier.scheduler.start_urls import StartUrlIntake
from scrapy_frontier.scrapy_compat import close_spider
from scrapy_frontier.serialize import (
    PUSHED_META,
    RequestRefused,
    request_from_json,
    request_to_json,
    without_default_port,
)
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_frontier.redis_health import RedisHealth
    from scrapy_frontier.scheduler.config import SchedulerConfig
    from scrapy_frontier.scheduler.join import Session

logger = logging.getLogger(__name__)

#: Hosts whose pace a worker keeps (forgotten past it: their latencies then go at once).
_PACES_KEPT = 100_000
#: Requests one push call sends at most.
_PUSH_BATCH = 1000
#: Seconds at most that what a worker buffers for Redis (links, acknowledgements, latencies) waits
#: for a refill's call to ride on (FrontierLoop._flush_due).
_FLUSH_HOLD = 1.0
#: Seconds between two checks that Redis holds no lease this worker does not know of.
_RECONCILE_INTERVAL = 30.0
#: Longest wait between two looks for due revisits (seconds), and most pages one look queues per shard.
_REVISIT_LOOK = 1.0
_REVISIT_BATCH = 500
#: Seconds past a host's due time that a worker holding leases of its own waits before it asks,
#: when other workers are registered: at a host whose rate binds, the idle worker takes the next
#: turn, and the workers of a one-host crawl share it rather than the first one keeping it. At
#: most _YIELD_SHARE of the wait between the worker's last lease and the due time, so that short
#: turns (AutoThrottle's) lose little when no worker is idle.
_YIELD_TO_IDLE = 0.03
_YIELD_SHARE = 0.05


def _payload_request(payload: str | bytes) -> str:
    """``<METHOD url>`` of a queued request's payload, as Scrapy writes a request in its log."""
    try:
        data = json.loads(payload)
        return f"<{data.get('method', 'GET')} {data['url']}>"
    except (ValueError, TypeError, KeyError):
        return repr(payload[:200])


#: The error codes Redis starts an error reply with (a script's or a pipeline's error quotes them).
_REDIS_ERROR_CODE = re.compile(
    r"(?<![A-Za-z])(WRONGTYPE|NOSCRIPT|BUSY|READONLY|NOPERM|CROSSSLOT|CLUSTERDOWN|TRYAGAIN|LOADING|MASTERDOWN|"
    r"NOREPLICAS|EXECABORT|OOM|ERR)(?![A-Za-z])"
)


def redis_error_code(text: str) -> str | None:
    """The Redis error code in an error's text (``WRONGTYPE``, ``ERR``...), or ``None``: the same
    refusal reads differently from a pipeline, a script or a plain command."""
    match = _REDIS_ERROR_CODE.search(text)
    return match.group(1) if match else None


class FrontierLoop:
    """One worker's side of a joined crawl (``session``, :func:`~scrapy_frontier.scheduler.join.join`):
    :meth:`enqueue` and :meth:`next_request` for the engine, never touching Redis; :meth:`start`
    runs the background task until :meth:`close`."""

    def __init__(
        self,
        crawler: Crawler,
        config: SchedulerConfig,
        spider: Spider,
        session: Session,
        node_id: str,
        health: RedisHealth,
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.config = config
        self.spider = spider
        self.node_id = node_id
        self.health = health
        self.keys = session.keys
        self.frontier = session.frontier
        self.heartbeat = session.heartbeat
        self.dedup = session.dedup
        self.dead = session.dead
        self.seen = session.seen
        self.epoch = session.epoch
        self.fingerprinter = session.fingerprinter
        self._state_lost = False
        self.leases = LeaseBook(self.keys, node_id, self.stats, config.download_maxsize)
        self.intake = StartUrlIntake(spider, self.stats, node_id, config.start_max_bytes, config.encoding)
        #: Leased requests not yet handed to the engine, those booked for later until their time.
        self._local = SendBuffer()
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_timer_at = 0.0
        self._to_push: list[Entry] = []
        #: Revisits to schedule (host, schedule_args values), sent before the acknowledgements.
        self._to_schedule: list[tuple[str, list[Any]]] = []
        self._next_revisit_look = 0.0
        self._log_duplicates = True
        self._wait_short_seen = 0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._poll_delay = 0.0
        self._next_poll = 0.0
        self._next_flush = 0.0
        self._turn: float | None = None
        self._idle_since: float | None = None
        self._idle_confirmed = False
        self._outage_since: float | None = None
        self._last_task_error: str | None = None  # logged once while it repeats
        self._next_reconcile = time.monotonic() + _RECONCILE_INTERVAL
        self._rates: dict[bytes, bytes] | None = None
        #: The shared AutoThrottle's latency samples not yet sent, by host (Frontier.push).
        self._samples = LatencySamples()
        #: Each host's time between sends (seconds) and whether a rule other than AutoThrottle
        #: sets it, from its last lease (the shared AutoThrottle's).
        self._pace: dict[str, tuple[float, bool]] = {}
        self._next_rates = 0.0
        self._started = time.time()

    def start(self) -> None:
        """Start the heartbeat thread and the background task."""
        self.heartbeat.start()
        self._task = self._loop.create_task(self._run())

    def __len__(self) -> int:
        """Requests leased and not yet handed to the engine."""
        return len(self._local)

    async def record_crawl(self) -> None:
        """Add this crawl to ``scrapy-frontier:crawls`` (``scrapy status`` lists the crawls there)."""
        try:
            await self.frontier.redis.sadd(self.config.crawls_key, self.keys.crawl)
        except REDIS_FAILURES as exc:
            logger.warning(
                "Could not record the crawl in %s (%s); scrapy status lists it once a worker can",
                self.config.crawls_key,
                describe_error(exc),
            )

    def enqueue(self, request: Request) -> str:
        """Buffer ``request`` for the frontier: ``"queued"``, ``"duplicate"`` (this worker queued
        it already) or ``"refused"`` (it cannot be serialized; logged and counted)."""
        replaced = self.leases.replaced(request)
        url = without_default_port(request.url)
        if url != request.url:
            request = request.replace(url=url)
        if REVISIT_IN_META in request.meta:
            return self._schedule(request)
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
        # The spider's own start requests (marked is_start_request) have dont_filter, and every
        # worker yields them: each is fetched once per crawl, deduplicated among start requests
        # only (start_fingerprint), so that a link to the same page is still followed with its
        # own callback, as plain Scrapy follows it.
        fingerprint = ""
        digest = b""
        seen_key = 0
        start = not dedup and request.meta.get("is_start_request") and LEASE_META not in request.meta
        if dedup or start:
            digest = self.fingerprinter.fingerprint(request)
            if start and not request.meta.get(PUSHED_META):
                digest = start_fingerprint(digest)
            seen_key = fingerprint_int64(digest)
            if seen_key in self.seen:
                # This worker queued it already: the shared dupefilter would refuse it too, so
                # spare the serialization and the bytes to Redis.
                self._filtered(request)
                return "duplicate"
            fingerprint = digest.hex()
        payload = self._serialized(request, "request")
        if payload is None:
            return "refused"
        if digest:
            self.seen.add(seen_key)
        self._to_push.append(
            Entry(fingerprint, queue_host(urlparse_cached(request).hostname), -request.priority, payload)
        )
        self.stats.inc_value("scheduler/enqueued/redis")
        self._wakeup.set()
        return "queued"

    def _serialized(self, request: Request, what: str) -> str | None:
        """``request``'s JSON, or ``None`` when it cannot be serialized (logged as a refused
        ``what``, counted in ``frontier/refused/<reason>``)."""
        try:
            return request_to_json(request, self.spider)
        except RequestRefused as exc:
            logger.error("Refused %s %s of spider %r: %s", what, request.url, self.spider.name, exc)
            self.stats.inc_value(f"frontier/refused/{exc.reason}")
            return None

    def _schedule(self, request: Request) -> str:
        """Buffer a revisit (:mod:`scrapy_frontier.revisit`) for the revisit schedule:
        ``"queued"`` or ``"refused"``."""
        seconds, since = request.meta.pop(REVISIT_IN_META)
        state = request.meta[REVISIT_META]
        payload = self._serialized(request.replace(meta={**request.meta, REVISIT_META: STATE_MARK}), "revisit")
        if payload is None:
            return "refused"
        host = queue_host(urlparse_cached(request).hostname)
        fingerprint = self.fingerprinter.fingerprint(request).hex()
        try:
            args = schedule_args(payload, host, str(-request.priority), fingerprint, float(seconds), int(since), state)
        except (ValueError, KeyError, TypeError) as exc:
            logger.error("Refused revisit %s of spider %r: %s", request.url, self.spider.name, exc)
            self.stats.inc_value("frontier/refused/revisit")
            return "refused"
        self._to_schedule.append((host, args))
        self._wakeup.set()
        return "queued"

    async def _send_schedule(self) -> None:
        """Schedule the buffered revisits (before the acknowledgements of their pages go)."""
        if self._to_schedule:
            revisits = self._to_schedule[:]
            await self.frontier.schedule(revisits)
            del self._to_schedule[: len(revisits)]

    async def _queue_due(self) -> None:
        """Queue the revisits that are due, at most every :data:`_REVISIT_LOOK` seconds (sooner
        when the next one is due sooner)."""
        if not self.config.revisit or time.monotonic() < self._next_revisit_look:
            return
        low, high = self.config.revisit_bounds
        # a page's records are at least its shortest interval apart; a duplicate (its worker died
        # between scheduling and acknowledging it) is due within a lease's reclaim
        moved, next_in = await self.frontier.queue_due(_REVISIT_BATCH, min(0.9 * low, 600.0), high + 86400)
        wait = _REVISIT_LOOK if next_in < 0 else min(_REVISIT_LOOK, max(0.05, next_in))
        self._next_revisit_look = time.monotonic() + (0.0 if moved >= _REVISIT_BATCH else wait)
        if moved:
            self.stats.inc_value("revisit/due", moved)
            self._next_poll = 0.0

    def response_downloaded(self, response: Response, request: Request) -> None:
        """Keep ``response``'s download latency for the shared AutoThrottle (sent with the next
        flush), as Scrapy's AutoThrottle takes it: not when ``download_latency`` is missing or
        ``autothrottle_dont_adjust_delay`` is set in meta."""
        latency = request.meta.get("download_latency")
        if latency is None or request.meta.get("autothrottle_dont_adjust_delay", False) is True:
            return
        host = queue_host(urlparse_cached(request).hostname)
        micros = int(latency * 1e6)
        autothrottle = self.config.autothrottle
        self._samples.add(
            host,
            micros if response.status == 200 else -1 - micros,
            time.monotonic(),
            urgent=autothrottle is None or moves_pace(latency / autothrottle.target_concurrency, self._pace.get(host)),
        )
        if autothrottle is not None and autothrottle.debug:
            logger.info(
                "host: %(host)s | the crawl's delay: %(delay)5d ms | latency: %(latency)5d ms | size: %(size)6d B",
                {
                    "host": host,
                    "delay": self._pace.get(host, (autothrottle.start_delay, False))[0] * 1000,
                    "latency": latency * 1000,
                    "size": len(response.body),
                },
                extra={"spider": self.spider},
            )

    def _filtered(self, request: Request) -> None:
        """A request dropped as a duplicate: counted, and logged as Scrapy's dupefilter does
        (the first one, or each with ``DUPEFILTER_DEBUG``)."""
        self.stats.inc_value("dupefilter/filtered")
        self._log_filtered(request)

    def _log_filtered(self, request: Request | str) -> None:
        if self.config.dupefilter_debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request}, extra={"spider": self.spider})
        elif self._log_duplicates:
            msg = (
                "Filtered duplicate request: %(request)s - no more duplicates will be shown "
                "(see DUPEFILTER_DEBUG to show all duplicates)"
            )
            logger.debug(msg, {"request": request}, extra={"spider": self.spider})
            self._log_duplicates = False

    def next_request(self) -> Request | None:
        if self._low():
            self._wakeup.set()
        request = self._local.pop(time.monotonic())
        if request is None:
            self._wake_at_send_time()
            return None
        self.stats.inc_value("scheduler/dequeued/redis")
        return request

    def _wake_at_send_time(self) -> None:
        """Have the engine ask again when the first request booked for later may leave."""
        at = self._local.next_send()
        if at is None or (self._send_timer is not None and self._send_timer_at <= at):
            return
        if self._send_timer is not None:
            self._send_timer.cancel()
        self._send_timer_at = at
        self._send_timer = self._loop.call_later(max(0.0, at - time.monotonic()), self._send_time_came)

    def _send_time_came(self) -> None:
        self._send_timer = None
        scrapy_internals.wake_engine(self.crawler)

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
                    kind = redis_error_code(text) or text
                    if kind != self._last_task_error:  # once while the same error repeats
                        self._last_task_error = kind
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
        now = time.monotonic()
        wait = min(self._next_poll - now, 1.0) if self._low() else 1.0
        if self._to_send():
            wait = min(wait, self._next_flush - now)
        return max(0.0, wait)

    def _to_send(self) -> bool:
        """Whether links, acknowledgements or dead letters wait to be sent to Redis."""
        return bool(self._to_push or self.leases.to_ack or self.leases.to_fail)

    def _room(self) -> int:
        """How many requests a lease takes: up to ``FRONTIER_PREFETCH`` buffered that count
        (:attr:`SendBuffer.counted`), and twice as many in all."""
        prefetch = self.config.prefetch
        return min(prefetch - self._local.counted, 2 * prefetch - len(self._local))

    def _low(self) -> bool:
        """Whether the buffer is low enough to lease: room for half ``FRONTIER_PREFETCH``."""
        return self._room() >= self.config.prefetch - self.config.prefetch // 2

    def _refill_due(self) -> bool:
        """Whether to lease now: the buffer is low (:meth:`_low`), and the next poll is due or the
        buffered push would make it due (:meth:`_pushed`: links queued, or a lease of a host its
        concurrency cap parked acknowledged), which then rides on the same round trip."""
        if not self._low():
            return False
        return (
            time.monotonic() >= self._next_poll
            or bool(self._to_push)
            or bool(self.leases.to_ack and self.frontier.concurrency_cap)
        )

    def _flush_due(self) -> bool:
        """Whether what is buffered for Redis goes now, with no refill to ride on: a full push
        batch, a latency that moves a host's pace (:attr:`LatencySamples.pressing`), or held
        :data:`_FLUSH_HOLD` seconds. A worker whose buffer is full sends its links and
        acknowledgements with its next lease, in one round trip, rather than one call each."""
        return (
            len(self._to_push) >= _PUSH_BATCH
            or self._samples.pressing
            or bool(self._to_schedule)
            or time.monotonic() >= self._next_flush
        )

    async def _step(self) -> None:
        if self._state_lost:
            return
        if self.heartbeat.state_lost:
            self._lose_state(self.heartbeat.lost_key)
            return
        if self._outage_since is not None and await self._epoch_gone():
            return  # a restart is an outage: the crawl's state must have survived it before anything is written
        forgets = self.heartbeat.forgets
        if self.seen.forgets_seen(forgets):
            logger.info(
                "URLs were forgotten (scrapy forget): the local first look is emptied, links are checked in Redis again"
            )
        await self._queue_due()
        running = self.crawler.engine.running
        to_send = self._to_send()
        refill = running and self._refill_due()
        if to_send and refill and self.frontier.one_call and len(self._to_push) <= _PUSH_BATCH:
            got: int | None = await self._flush_and_refill()
        else:
            if refill or not running or self._flush_due():
                await self._flush()
            if not self.crawler.engine.running:
                # The engine is stopping (SIGINT/SIGTERM): give back at once what was not started,
                # rather than once the requests in flight are done.
                await self._give_back_unstarted()
                return
            got = await self._refill() if refill else None
        if got is not None:
            due = self.frontier.next_due_in
            if got:
                self._poll_delay = 0.0
                self._turn = None
                scrapy_internals.wake_engine(self.crawler)
            else:
                self._poll_delay = min(self.config.poll_max, max(0.05, self._poll_delay * 2))
                if self._turn is None and 0 <= due <= self.config.poll_max:
                    # the wait for the next due host, first seen after a lease (a host parked at its
                    # concurrency cap, due in 30 s, is no turn: an acknowledgement brings it back)
                    self._turn = due
            delay = self._poll_delay
            if not got and due >= 0 and delay >= due:
                # a host is queued but not due yet (politeness): come back when it is, or a moment
                # later when holding leases and another worker may be idle
                busy = len(self.leases) and self.heartbeat.nodes > 1
                give = min(_YIELD_TO_IDLE, _YIELD_SHARE * (self._turn or 0.0)) if busy else 0.0
                delay = max(0.005, due + give)
            self._next_poll = time.monotonic() + delay
        if self._outage_since is not None or time.monotonic() >= self._next_reconcile:
            await self._reconcile()
        if self.keys.shards and time.monotonic() >= self._next_rates:
            self._next_rates = time.monotonic() + self.config.rates_refresh
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
            self.seen.clear()  # their acknowledgements were lost: so perhaps their children
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
        self.seen.clear()
        if self._outage_since is None:
            self._outage_since = time.monotonic()

    def _forgo_pushes(self) -> None:
        """Leaving while Redis is out of memory, which refuses the pushes (they would grow it):
        drop the links and dead letters found by the pages this worker leased, and their
        acknowledgements, so that those pages go back to the frontier with every other lease
        (:meth:`Frontier.release`, which Redis runs at ``maxmemory``: it moves requests, and the
        freed lease hash pays for them), to be fetched again and their links found again."""
        links, pages = len(self._to_push), len(self.leases.to_ack) + len(self.leases.to_fail)
        if links or pages:
            logger.warning(
                "Redis is out of memory: the %s found by this worker's last %s are not queued; those pages go "
                "back to the frontier, to be fetched again",
                plural(links, "link"),
                plural(pages, "page"),
            )
            self.stats.inc_value("frontier/forgone_pushes", links)
        self._to_push.clear()
        self.leases.to_ack.clear()
        self.leases.to_fail.clear()

    async def _flush(self) -> None:
        # Flush what is buffered now; what arrives meanwhile waits for the next round.
        await self._send_schedule()
        to_ack, to_fail = self.leases.to_ack, self.leases.to_fail
        for _ in range(len(self._to_push) // _PUSH_BATCH + 1):
            entries = self._to_push[:_PUSH_BATCH]
            # Acknowledgements go with the last batch of pushes, never before them.
            last = len(entries) == len(self._to_push)
            acks = to_ack[:] if last else []
            failed = to_fail[:] if last else []
            duplicates: list[Any] | None = (
                [] if entries and (self.config.dupefilter_debug or self._log_duplicates) else None
            )
            samples = self._take_samples() if last else None
            if entries or acks or failed or samples:
                self.stats.inc_value("frontier/calls/push")
            added = await self.frontier.push(entries, acks, failed, duplicates, samples)
            self._pushed(entries, acks, failed, added, duplicates)

    def _pushed(
        self, entries: list[Entry], acks: list[Any], failed: list[str], added: int, duplicates: list[Any] | None
    ) -> None:
        """What a push call that returned ``added`` sent is no longer to send; counted."""
        to_ack, to_fail = self.leases.to_ack, self.leases.to_fail
        self._next_flush = time.monotonic() + _FLUSH_HOLD
        if self.frontier.wait_short > self._wait_short_seen:
            if not self._wait_short_seen:
                logger.warning(
                    "WAIT saw fewer than %s within %.1fs; acknowledging anyway (a failover now may lose those pushes)",
                    plural(self.frontier.wait_replicas, "replica"),
                    self.config.wait_timeout,
                )
            self.stats.inc_value("frontier/replica_wait_short", self.frontier.wait_short - self._wait_short_seen)
            self._wait_short_seen = self.frontier.wait_short
        del self._to_push[: len(entries)]
        del to_ack[: len(acks)]
        if acks and self.frontier.concurrency_cap:
            self._next_poll = 0.0  # a host the cap held may be due again
        del to_fail[: len(failed)]
        if entries:
            self.stats.inc_value("dupefilter/filtered", len(entries) - added)
            for payload in duplicates or ():
                self._log_filtered(_payload_request(payload))
            self.stats.inc_value("frontier/queued", added)
            if added:
                self._next_poll = 0.0

    async def _refill(self) -> int:
        want = self._room()
        self.stats.inc_value("frontier/calls/lease")
        leases = await self.frontier.lease(want)
        if not leases and await self._feed_start_urls():
            await self._flush()
            leases = await self.frontier.lease(want)
        return self._take(leases)

    async def _flush_and_refill(self) -> int:
        """:meth:`_flush` and :meth:`_refill` in one round trip (Frontier.push_lease, for an
        unsharded frontier and at most one push batch). Returns the requests leased."""
        want = self._room()
        await self._send_schedule()
        entries, acks, failed = self._to_push[:], self.leases.to_ack[:], self.leases.to_fail[:]
        duplicates: list[Any] | None = (
            [] if entries and (self.config.dupefilter_debug or self._log_duplicates) else None
        )
        self.stats.inc_value("frontier/calls/push_lease")
        added, leases = await self.frontier.push_lease(entries, acks, failed, duplicates, want, self._take_samples())
        # each call's outcome is kept whatever the other's: leases taken are this worker's to
        # crawl, a push made is not to be made again
        got = 0 if isinstance(leases, Exception) else self._take(leases)
        if isinstance(added, Exception):
            raise added
        self._pushed(entries, acks, failed, added, duplicates)
        if isinstance(leases, Exception):
            raise leases
        if not got and await self._feed_start_urls():
            await self._flush()
            got = self._take(await self.frontier.lease(want))
        return got

    def _take_samples(self) -> dict[str, list[int]] | None:
        """The latency samples due to be sent (:class:`~scrapy_frontier.politeness.LatencySamples`),
        all of them once the worker is stopping, taken out of the buffer (a failed flush loses
        them: a delay misses a few responses, nothing else)."""
        return self._samples.take(time.monotonic(), everything=self._stopping)

    def _take(self, leases: list[Lease]) -> int:
        """Queue locally the requests of ``leases`` (an unreadable one goes to the dead
        letters), a request with a send booked for later held until then (:class:`SendBuffer`;
        its time in meta, :data:`~scrapy_frontier.politeness.SEND_AT_META`); learn the seen
        feed's news. Returns how many leases."""
        now = time.monotonic()
        for lease in leases:
            try:
                request = request_from_json(lease.payload, self.spider)
            except Exception as exc:
                self.leases.unreadable(lease, exc)
                continue
            if REVISIT_META in request.meta and add_validators(request):
                self.stats.inc_value("revisit/conditional")
            if lease.send_in >= 0:
                request.meta[SEND_AT_META] = (now + lease.send_in, lease.interval, lease.strict, now)
                if self.config.autothrottle is not None:
                    if len(self._pace) >= _PACES_KEPT:
                        self._pace.clear()
                    self._pace[lease_host(lease.field).decode()] = (lease.interval, lease.strict)
            self.leases.take(lease, request)
            self._local.append(request, now + lease.send_in if lease.send_in >= 0 else None, now, lease.strict)
        self.stats.inc_value("frontier/leased", len(leases))
        if self.frontier.fed:
            packed = self.dedup.layout == "packed"
            self.stats.inc_value("frontier/seen_feed", self.seen.learn(self.frontier.fed, packed))
            self.frontier.fed = []
        return len(leases)

    async def _feed_start_urls(self) -> int:
        """Take a batch of start URLs into the local buffers (to push). Returns how many were taken."""
        raws = await self.frontier.take_start_urls(self.config.start_batch)
        refused: list[dict[str, Any]] = []
        for raw in raws:
            self.leases.to_ack.append(START_PREFIX + raw)
            requests, record = self.intake.requests(raw)
            if record is not None:
                refused.append(record)
                continue
            for request in requests:
                if self.enqueue(request) == "refused":
                    refused.append(
                        self.intake.refuse(
                            raw, RequestRefused("refused", f"the frontier refused the request for {request.url}")
                        )
                    )
                else:
                    self.stats.inc_value("start_urls/accepted")
        # Kept (one round trip for the batch) before their leases are released by the next flush.
        await self.dead.push(self.keys.start_urls_invalid, refused)
        return len(raws)

    def node_info(self) -> dict[str, Any]:
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": int(self._started),
            "pages": self.stats.get_value("response_received_count", 0),
            "items": self.stats.get_value("item_scraped_count", 0),
            "leases": len(self.leases),
            # the crawl's politeness as this worker applies it (scrapy status reads the busy hosts with it)
            "domain_rate": self.config.domain_rate,
            "domain_concurrency": self.config.domain_concurrency,
        }

    def dropped(self) -> None:
        # Called on the heartbeat thread: this node had been declared dead and its leases went
        # back to the frontier. Drop, on the reactor thread, what it had not started yet.
        self._loop.call_soon_threadsafe(self._forget_unstarted)

    def _forget_unstarted(self) -> None:
        for request in self._local:
            self.leases.forget(request.meta[LEASE_META])
        self._local.clear()
        self.stats.inc_value("frontier/rejoined")
        logger.warning(
            "This node had been declared dead and its leases reclaimed; rejoining "
            "(pages in flight may be fetched twice)"
        )

    def state_lost(self) -> None:
        # Called on the heartbeat thread: the crawl's epoch is gone from Redis.
        self._loop.call_soon_threadsafe(self._lose_state, self.heartbeat.lost_key)

    def _lose_state(self, key: str = "") -> None:
        """The crawl's state in Redis is gone: say so in one line and stop the crawl (finish
        reason :data:`~scrapy_frontier.config.STATE_LOST`: ``scrapy crawl`` exits with status 1),
        with neither "finished" nor a clear of what is left, nor leases given back."""
        if self._state_lost:
            return
        self._state_lost = True
        self.stats.set_value("frontier/state_lost", 1)
        logger.error(
            "The crawl's state in Redis is gone (%s has no epoch %s): Redis restarted without persistence, "
            "or a replica was promoted before it synced. This worker fetched %s and scraped %s, which stay "
            "stored; it stops here. Start the crawl again from its start URLs (docs/operating.md, "
            '"When things fail")',
            key or self.keys.dupefilter_meta,
            self.epoch.decode(),
            plural(self.stats.get_value("response_received_count", 0), "page"),
            plural(self.stats.get_value("item_scraped_count", 0), "item"),
        )
        self._loop.create_task(close_spider(self.crawler, STATE_LOST))

    async def _epoch_gone(self) -> bool:
        """Whether the crawl's epoch is gone from Redis, from the meta or from a shard (one round
        trip); if so, :meth:`_lose_state`."""
        if self._state_lost:
            return True
        shard_epochs = self.keys.epoch_keys()
        async with self.frontier.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.dupefilter_meta, "epoch")
            for key in shard_epochs:
                pipe.get(key)
            epochs = await pipe.execute()
        for key, epoch in zip([self.keys.dupefilter_meta, *shard_epochs], epochs):
            if epoch != self.epoch:
                self._lose_state(key)
                return True
        return False

    # -- idle -----------------------------------------------------------------------------

    def _busy(self) -> bool:
        """Whether this worker holds anything: requests leased or to push, acknowledgements to send."""
        return bool(self._local or len(self.leases) or self._to_push or self.leases.to_ack or self._to_schedule)

    async def _check_idle(self) -> None:
        """Read the whole crawl's status when this worker holds nothing; once two reads at least
        ``close_after`` seconds apart (and every one between) found it idle, wake the engine so
        that :meth:`on_idle` lets the spider close."""
        if self._busy() or self.config.close_after <= 0 or self.config.revisit:
            self._idle_since = None
            self._idle_confirmed = False
            return
        status = await self.frontier.status()
        if not status.idle or self._busy():
            self._idle_since = None
            self._idle_confirmed = False
        elif self._idle_since is None:
            self._idle_since = time.monotonic()
        elif time.monotonic() - self._idle_since >= self.config.close_after and not await self._epoch_gone():
            # an empty Redis looks idle too: the crawl finishes only if its state is still there
            self._idle_confirmed = True
            scrapy_internals.wake_engine(self.crawler)

    def on_idle(self, spider: Spider) -> None:
        # the engine is idle once the spider's start requests are in this worker's buffers, not
        # yet in Redis: the crawl is dry only if they were pushed (or found duplicates) since
        if self.config.close_after <= 0 or not self._idle_confirmed or self._busy():
            raise DontCloseSpider
        logger.info(
            "Closing: the whole crawl has been idle for %ss (%s)",
            f"{self.config.close_after:g}",
            "MAX_IDLE_TIME_BEFORE_CLOSE or the spider's max_idle_time"
            if self.config.idle_close > 0
            else "the spider does not wait for start URLs in Redis; SCHEDULER_IDLE_BEFORE_CLOSE",
        )

    # -- closing --------------------------------------------------------------------------

    async def close(self, reason: str) -> None:
        self._stopping = True
        self._wakeup.set()
        if self._send_timer is not None:
            self._send_timer.cancel()
        if self._task is not None:
            await self._task
        await asyncio.to_thread(self.heartbeat.stop)
        self.heartbeat.client.close()
        if self._state_lost or self.heartbeat.state_lost:
            # Nothing to give back to: what this node would write would be a crawl of its own. It
            # only takes itself out of the nodes registry its heartbeat wrote again.
            with contextlib.suppress(*REDIS_FAILURES):
                await self.frontier.leave()
            return
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.health.state == OUT_OF_MEMORY:
                    self._forgo_pushes()
                else:
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
                        "Could not return leases to Redis before exiting; other nodes reclaim them after "
                        "FRONTIER_NODE_TIMEOUT"
                    )
                    return
                await asyncio.sleep(1.0)
        self._local.clear()
        self.leases.clear()
        if released:
            self.stats.inc_value("frontier/released", released)
            logger.info("Returned %s to the frontier", plural(released, "leased request"))
        if not self.config.persist and reason == "finished":
            status = await self.frontier.status()
            if status.idle and status.nodes == 0 and not await self._epoch_gone():
                await self.frontier.clear()
                await self.frontier.redis.srem(self.config.crawls_key, self.keys.crawl)
                logger.info(
                    "Crawl finished and this was the last node: cleared the frontier and dupefilter "
                    "(SCHEDULER_PERSIST=False)"
                )
