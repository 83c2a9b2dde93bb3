"""The cluster-wide totals and the Redis gauges of a worker, in one round trip.

Every worker adds what its counters grew by since its last refresh to ``<spider>:stats``
(``HINCRBY``; scrapy-redis's ``STATS_KEY``), so that hash holds the whole crawl's totals, which
``scrapy status`` and the cluster's progress line show. In the same pipeline, sent together with
the frontier's status script (:meth:`Frontier.status <scrapy_frontier.frontier.Frontier.status>`,
so the key logic stays there), it reads the gauges of the crawl (frontier depth, this worker's
leases, dead letters, throttled hosts, and the busy hosts with what holds each back: a second
round trip, when any host has requests in flight) and re-records the worker's metrics address in its node
info hash (``lua/hash_set_if_exists.lua``: only while the heartbeat keeps the hash).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy_frontier.connection import REDIS_FAILURES, client_failure, describe_error
from scrapy_frontier.frontier import Frontier
from scrapy_frontier.politeness import busiest, busy_hosts, read_busy_hosts, read_limited_sample
from scrapy_frontier.redis_health import RedisHealth
from scrapy_frontier.scripts import source
from scrapy_frontier.status import Status

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from redis.asyncio import Redis

    from scrapy_frontier.keys import Keys

logger = logging.getLogger(__name__)

#: Cluster totals (fields of ``<spider>:stats``) and the Scrapy stat each one sums. Besides
#: these: ``responses/<status>`` (``downloader/response_status_count/<status>``) and
#: ``politeness_wait_ms`` (``politeness/wait_seconds``, in milliseconds).
TOTALS = {
    "pages": "response_received_count",
    "items_scraped": "item_scraped_count",
    "items_stored": "item_stored_count",
    "items_dropped": "item_dropped_count",
    "retries": "retry/count",
    "revisits_changed": "revisit/changed",
    "revisits_unchanged": "revisit/unchanged",
    "revisits_not_modified": "revisit/not_modified",
}
#: Scrapy stat prefix of the responses by HTTP status.
STATUS_STAT = "downloader/response_status_count/"
#: Scrapy stat of the seconds requests waited for their host's shared send time.
WAIT_STAT = "politeness/wait_seconds"


def cluster_counts(stats: dict[str, Any]) -> dict[str, int]:
    """This worker's contribution to the cluster totals, from its Scrapy stats: the fields of
    :data:`TOTALS`, ``responses/<status>`` and ``politeness_wait_ms`` (integers)."""
    counts = {field: int(stats.get(name, 0)) for field, name in TOTALS.items()}
    for name, value in list(stats.items()):
        if name.startswith(STATUS_STAT):
            counts["responses/" + name[len(STATUS_STAT) :]] = int(value)
    counts["politeness_wait_ms"] = int(float(stats.get(WAIT_STAT, 0)) * 1000)
    return counts


@dataclass(frozen=True)
class Gauges:
    """The crawl's gauges read from Redis; None where that one read failed."""

    #: Requests queued in the frontier, cluster-wide.
    frontier_depth: int
    #: Dead letters: requests that failed for good (``<spider>:requests:failed``).
    failed_requests: int
    #: Requests this worker has leased and not acknowledged.
    leases: int | None
    #: Dead letters: refused start URLs, invalid items.
    start_urls_invalid: int | None
    items_invalid: int | None
    #: Hosts slowed down, paused or with a Crawl-delay (``<spider>:politeness:@limited``).
    throttled_hosts: int | None
    #: The busy hosts (:func:`scrapy_frontier.politeness.busy_host`), most requests in flight first.
    busy_hosts: list[dict[str, Any]] = field(default_factory=list)
    #: The revisit schedule (docs/revisits.md): pages scheduled, pages due now and not yet
    #: queued, seconds the earliest of them is overdue (0: none due).
    revisits_scheduled: int | None = None
    revisits_due: int | None = None
    revisits_overdue_seconds: float | None = None


class ClusterTotals:
    """Push one worker's counts to the cluster totals and read the gauges (needs only a
    redis.asyncio client). An outage or a Redis out of memory goes to ``health`` (reported once
    for the worker); another Redis error is logged once, then again when Redis answers; the
    deltas not added are added by the next refresh."""

    def __init__(
        self,
        client: Redis,
        keys: Keys,
        node_id: str,
        *,
        start_urls_as_set: bool = False,
        health: RedisHealth | None = None,
        default_rate: float = 0.0,
        concurrency_cap: int = 0,
    ) -> None:
        """``default_rate`` and ``concurrency_cap``: the crawl's ``DOMAIN_RATE_LIMIT`` and
        ``DOMAIN_CONCURRENCY``, which the busy hosts are read with."""
        self.redis = client
        self.default_rate = default_rate
        self.concurrency_cap = concurrency_cap
        self.keys = keys
        self.node_id = node_id
        self.frontier = Frontier(client, keys, node_id, start_urls_as_set=start_urls_as_set)
        #: The counts last added to the totals, by field.
        self._pushed: dict[str, int] = {}
        self._failing = False
        self._answered = False
        #: Set when the crawl closes: from then on a failed refresh is not reported (a failed final one is).
        self.quiet = False
        self._set_if_exists = source("hash_set_if_exists")
        self._revisit_count = source("revisit_count")
        self.health = health or RedisHealth()

    async def refresh(self, stats: dict[str, Any], *, address: str | None = None, final: bool = False) -> Gauges | None:
        """Add what :func:`cluster_counts` of ``stats`` grew by since the last call to
        ``<spider>:stats``; unless ``final``, also read the gauges and record ``address`` (the
        metrics server's ``host:port``) as field ``metrics`` of this node's info hash. Returns the
        gauges, or None (``final``, or Redis unreachable). Errors other than Redis's are raised."""
        counts = cluster_counts(stats)
        deltas = {
            field: value - self._pushed.get(field, 0)
            for field, value in counts.items()
            if value != self._pushed.get(field, 0)
        }
        if final and not deltas:
            return None
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for field, delta in deltas.items():
                pipe.hincrby(k.stats, field, delta)
            shards = k.all_shards()
            if not final:
                for sh in shards:
                    pipe.eval(source("lease_count"), 1, sh.leases(self.node_id))
                pipe.llen(k.start_urls_invalid)
                pipe.llen(k.items_invalid)
                for sh in shards:
                    pipe.scard(sh.limited)
                for sh in shards:
                    pipe.hgetall(sh.inflight)
                for sh in shards:
                    pipe.eval(self._revisit_count, 3, sh.revisit_wheel, sh.revisit_meta, sh.revisit_due)
                if address:
                    # EVAL, not a registered script: those cost a SCRIPT EXISTS round trip per pipeline.
                    pipe.eval(self._set_if_exists, 1, k.node_info(self.node_id), "metrics", address)
            calls: list[Awaitable[Any]] = [pipe.execute(raise_on_error=False)]
            if not final:
                calls.append(self.frontier.status(deep=True))
            answers = await asyncio.gather(*calls, return_exceptions=True)
        results: list[Any] | BaseException = answers[0]
        error = next((r for r in answers if isinstance(r, BaseException)), None)
        if isinstance(error, BaseException) and not isinstance(error, REDIS_FAILURES) and not client_failure(error):
            raise error
        if not isinstance(results, BaseException):
            for (field, _), result in zip(deltas.items(), results):
                if not isinstance(result, Exception):
                    self._pushed[field] = counts[field]
        if error is not None:
            if final:
                logger.error("Could not add this worker's last counts to %s (%s)", k.stats, describe_error(error))
            elif self.health.failed(error):
                pass  # an outage, or Redis out of memory: reported once for the worker
            elif not self._failing and self._answered and not self.quiet:
                # (at start-up the scheduler reports an unusable Redis and closes the crawl)
                logger.warning(
                    "Metrics: Redis error (%s); totals and gauges are updated when it answers", describe_error(error)
                )
                self._failing = True
            return None
        self._answered = True
        self.health.answered()
        if self._failing:
            self._failing = False
            logger.info("Metrics: Redis answers again")
        if final:
            return None
        status = answers[1]
        assert isinstance(status, Status) and not isinstance(results, BaseException)  # errors returned above
        n = len(shards)
        reads: list[int | None] = [
            None if isinstance(v, Exception) else v for v in results[len(deltas) : len(deltas) + 2 * n + 2]
        ]
        leases = None if None in reads[:n] else sum(v or 0 for v in reads[:n])
        start_invalid, items_invalid = reads[n : n + 2]
        limited = None if None in reads[n + 2 :] else sum(v or 0 for v in reads[n + 2 :])
        inflight = results[len(deltas) + 2 * n + 2 : len(deltas) + 3 * n + 2]
        revisits = results[len(deltas) + 3 * n + 2 : len(deltas) + 4 * n + 2]
        busy = [] if any(isinstance(v, Exception) for v in inflight) else await self._busy_hosts(inflight)
        if any(isinstance(v, Exception) for v in revisits):
            return Gauges(status.depth, status.failed, leases, start_invalid, items_invalid, limited, busy)
        return Gauges(
            status.depth,
            status.failed,
            leases,
            start_invalid,
            items_invalid,
            limited,
            busy,
            revisits_scheduled=sum(int(r[0]) for r in revisits),
            revisits_due=sum(int(r[1]) for r in revisits),
            revisits_overdue_seconds=max([0, *(int(r[2]) for r in revisits if int(r[1]))]) / 1000,
        )

    async def _busy_hosts(self, inflight: list[dict[bytes, bytes]]) -> list[dict[str, Any]]:
        """The busy hosts of every shard's in-flight hash, their politeness state read in one
        round trip (none when no host has requests in flight); [] when Redis fails it."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                read_limited_sample(pipe, self.keys)
                limited = await pipe.execute()
        except REDIS_FAILURES:
            return []
        counts = busiest(inflight, limited=limited)
        if not counts:
            return []
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.time()
                read_busy_hosts(pipe, self.keys, counts)
                (seconds, micros), *replies = await pipe.execute()
        except REDIS_FAILURES:
            return []
        return busy_hosts(counts, replies, self.default_rate, self.concurrency_cap, seconds + micros / 1e6)
