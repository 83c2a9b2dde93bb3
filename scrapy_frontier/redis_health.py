"""A worker's Redis trouble, reported once: Redis unreachable, or Redis refusing writes because it
is at ``maxmemory``.

Every component that talks to Redis (the scheduler's task, the heartbeat thread, the cache and
storage pipelines, the metrics, the shared robots.txt) hands its Redis errors to the crawler's
one :class:`RedisHealth` (:func:`redis_health`). The first error of a kind starts an episode and
is the worker's one ERROR line about it; the errors of the same episode, from whichever
component, are only counted; the end of the episode is one more line. Each component retries
on its own, as before.

- **unreachable** (:data:`OUTAGE_ERRORS`: connection errors, timeouts, a Redis Cluster that is
  down or moving slots, a read-only replica after a failover, redis-py failing inside its own
  connection code): the episode ends with the first call that Redis answers
  :data:`SETTLE_SECONDS` or more after the episode's last connection error (a reply to a call
  sent before Redis went away, read while it goes, is not a recovery).
- **out of memory** (``OOM command not allowed when used memory > 'maxmemory'``: Redis at
  ``maxmemory`` with ``maxmemory-policy noeviction``, or a ``volatile-*`` policy and nothing to
  evict): the ERROR line names Redis's used and maximum memory (``INFO memory``, read on a
  thread of its own, never on the reactor) and what to do. Writes near the limit pass and fail
  in turn, so a call that passes does not end the episode: it ends once ``INFO memory`` shows
  the used memory within ``maxmemory`` (Redis's own rule: ``used_memory`` less
  ``mem_not_counted_for_evict``, evict.c) and no write has been refused for
  :data:`QUIET_SECONDS`.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis.exceptions

from scrapy_frontier.connection import REDIS_FAILURES, client_failure, describe_error, is_cluster, sync_redis

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: What an outage raises, a failover or a slot migration included (a Redis Cluster's "cluster is
#: down" and TRYAGAIN once redis-py's own retries are spent): retried with backoff.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterError,
    redis.exceptions.ReadOnlyError,
    OSError,
)
UNREACHABLE = "unreachable"
OUT_OF_MEMORY = "out_of_memory"
#: Seconds without a refused write before an out-of-memory episode may end.
QUIET_SECONDS = 5.0
#: Seconds after the last connection error before an answer ends an outage.
SETTLE_SECONDS = 1.0
#: Seconds between two reads of ``INFO memory`` while Redis refuses writes.
PROBE_SECONDS = 1.0


def trouble_of(exc: BaseException) -> str | None:
    """:data:`OUT_OF_MEMORY`, :data:`UNREACHABLE`, or ``None`` for an error that is neither (a
    bug, a script error, a wrong type: the caller's to report)."""
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return OUT_OF_MEMORY
    if isinstance(exc, OUTAGE_ERRORS) or client_failure(exc):
        return UNREACHABLE
    return None


def size_text(n: int) -> str:
    """Bytes as Redis's ``*_human`` fields count them (1 MiB = 1024 KiB = 1048576 bytes)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class Memory:
    """Memory figures of a Redis server, from ``INFO memory`` (bytes; ``maximum`` 0: no limit)."""

    used: int
    maximum: int
    policy: str
    not_counted: int = 0
    #: ``host:port`` of the fullest primary of a Redis Cluster, "" for a single Redis.
    node: str = ""

    @classmethod
    def from_info(cls, info: dict[str, Any], node: str = "") -> Memory:
        return cls(
            int(info.get("used_memory", 0)),
            int(info.get("maxmemory", 0)),
            str(info.get("maxmemory_policy", "?")),
            int(info.get("mem_not_counted_for_evict", 0)),
            node,
        )

    @property
    def fits(self) -> bool:
        """Whether Redis would accept a write now (evict.c, ``getMaxmemoryState``)."""
        return self.maximum == 0 or self.used - self.not_counted <= self.maximum

    def text(self) -> str:
        where = f" on {self.node}" if self.node else ""
        limit = size_text(self.maximum) if self.maximum else "none"
        return f"used_memory {size_text(self.used)}, maxmemory {limit}, maxmemory-policy {self.policy}{where}"


def read_memory(client: Any) -> Memory:
    """The :class:`Memory` of the Redis behind a blocking ``client``; of a Redis Cluster, its
    fullest primary (a cluster refuses writes node by node). Raises Redis errors."""
    if not is_cluster(client):
        return Memory.from_info(client.info("memory"))
    replies = client.info("memory", target_nodes=client.PRIMARIES)
    if replies and all(isinstance(v, dict) for v in replies.values()) and "used_memory" not in replies:
        figures = [Memory.from_info(info, str(node)) for node, info in replies.items()]
    else:  # one primary: redis-py returns its reply alone
        figures = [Memory.from_info(replies)]
    return max(figures, key=lambda m: (m.used - m.not_counted) / m.maximum if m.maximum else 0.0)


class RedisHealth:
    """The Redis episodes of one worker (see the module docstring); thread-safe (the heartbeat
    calls it from its thread). ``settings`` give the blocking client that reads ``INFO memory``
    (without them the out-of-memory line has no figures and its episode ends after
    :data:`QUIET_SECONDS` without a refusal); ``stats`` get ``frontier/redis_outages`` and
    ``frontier/redis_out_of_memory`` (episodes) and ``frontier/redis_refused_writes``."""

    def __init__(self, settings: BaseSettings | None = None, stats: StatsCollector | None = None) -> None:
        self.settings = settings
        self.stats = stats
        self._lock = threading.Lock()
        self._closed = threading.Event()
        #: The current episode's kind (None: Redis is fine), when it started, its number.
        self.state: str | None = None
        self._since = 0.0
        self._episode = 0
        self._last_refused = 0.0
        self._last_unreachable = 0.0

    def failed(self, exc: BaseException) -> bool:
        """Record a Redis error. Returns whether it is an outage or a refusal for lack of
        memory (the caller retries it quietly); ``False`` for any other error, which the caller
        reports itself."""
        kind = trouble_of(exc)
        if kind is None:
            return False
        with self._lock:
            now = time.monotonic()
            if kind == OUT_OF_MEMORY:
                self._last_refused = now
                self._inc("frontier/redis_refused_writes")
            else:
                self._last_unreachable = now
            if self.state == kind:
                return True
            self.state, self._since = kind, now
            self._episode += 1
            episode = self._episode
        if kind == UNREACHABLE:
            self._inc("frontier/redis_outages")
            logger.error("Redis unreachable (%s); retrying with backoff, nothing taken is dropped", describe_error(exc))
        else:
            self._inc("frontier/redis_out_of_memory")
            threading.Thread(target=self._watch_memory, args=(episode,), name="redis-memory", daemon=True).start()
        return True

    def answered(self) -> None:
        """Redis answered a call: the end of an outage (an out-of-memory episode ends by itself,
        see the module docstring)."""
        if self.state != UNREACHABLE:
            return
        with self._lock:
            if self.state != UNREACHABLE or time.monotonic() - self._last_unreachable < SETTLE_SECONDS:
                return
            self.state = None
            lasted = time.monotonic() - self._since
        logger.warning("Redis is reachable again after %.1fs", lasted)

    def close(self) -> None:
        """Stop watching Redis's memory (the crawler is closing)."""
        self._closed.set()

    def _inc(self, stat: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(stat)

    def _watch_memory(self, episode: int) -> None:
        """Log the out-of-memory line with Redis's figures, then read them every
        :data:`PROBE_SECONDS` until the episode ends (or another begins)."""
        client = None
        memory: Memory | None = None
        why = "INFO memory not read"
        try:
            if self.settings is not None:
                client = sync_redis(self.settings)
                memory = read_memory(client)
        except Exception as exc:  # an ACL without INFO, Redis gone meanwhile: the line without figures
            why = f"INFO memory not readable: {describe_error(exc)}"
        try:
            logger.error(
                "Redis refuses writes: it is out of memory (%s). The worker keeps what it holds and retries "
                "with backoff; nothing is dropped. Raise maxmemory (redis-cli CONFIG SET maxmemory <bytes>) "
                "or give Redis more memory (docs/sizing.md)",
                memory.text() if memory is not None else why,
            )
            while not self._closed.wait(PROBE_SECONDS):
                if client is not None:
                    try:
                        memory = read_memory(client)
                    except REDIS_FAILURES:
                        continue
                with self._lock:
                    if self.state != OUT_OF_MEMORY or self._episode != episode:
                        return
                    if (
                        memory is not None and not memory.fits
                    ) or time.monotonic() - self._last_refused < QUIET_SECONDS:
                        continue
                    self.state = None
                    lasted = time.monotonic() - self._since
                figures = f" ({memory.text()})" if memory is not None else ""
                logger.warning("Redis accepts writes again after %.1fs%s", lasted, figures)
                return
        finally:
            if client is not None:
                client.close()


_health: weakref.WeakKeyDictionary[Any, RedisHealth] = weakref.WeakKeyDictionary()


def redis_health(crawler: Any) -> RedisHealth:
    """The one :class:`RedisHealth` of ``crawler`` (made on first use; stops watching when the
    spider closes)."""
    health = _health.get(crawler)
    if health is None:
        health = _health[crawler] = RedisHealth(crawler.settings, crawler.stats)
        from scrapy import signals

        crawler.signals.connect(health.close, signals.spider_closed, weak=False)
    return health
