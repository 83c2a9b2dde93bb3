"""The node registry's heartbeat, and the reclaim of dead nodes' leases.

A worker beats on a thread of its own with a blocking client, so a callback that keeps the
reactor busy for seconds (a page with ten thousand links) never makes a live worker look dead:
the heartbeat says "this process is alive", like an etcd lease kept alive by its client. Each
beat refreshes ``<spider>:nodes`` (score = now, Unix ms, at the Redis server's time: a worker
whose clock is minutes off is neither seen as dead nor sees others so) and the node's facts in
``<spider>:nodes:<node>`` (with a TTL), then returns to the frontier the leases of every node
whose last beat is older than the node timeout (:func:`scrapy_frontier.reclaim.reclaim_dead`).
The two beat scripts run when Redis is at ``maxmemory`` (``allow-oom``, ``lua/nodes_beat.lua``):
a worker waiting for Redis to accept writes again is not taken for dead meanwhile. Redis errors
go to the worker's :class:`~scrapy_frontier.redis_health.RedisHealth`, which reports an outage
or a Redis out of memory once for the whole worker.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import redis

from scrapy_frontier.connection import REDIS_FAILURES, describe_error
from scrapy_frontier.reclaim import reclaim_dead
from scrapy_frontier.redis_health import RedisHealth
from scrapy_frontier.scripts import source

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy_frontier.keys import Keys

logger = logging.getLogger(__name__)

_node_ids: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_clocks: weakref.WeakKeyDictionary[Any, ServerClock] = weakref.WeakKeyDictionary()


class ServerClock:
    """The Redis server's clock seen from this process: this machine's clock plus the offset
    the last heartbeat measured (0 until then). For a time a worker must write into a request
    that another worker reads (a retry's not-before time); the scripts take ``TIME`` themselves."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        """The server's time now, Unix seconds (to a few ms)."""
        return time.time() + self.offset

    def measured(self, server_ms: int, sent: float, received: float) -> None:
        """Record a server time read between ``sent`` and ``received`` (this machine's clock)."""
        self.offset = server_ms / 1000 - (sent + received) / 2


def server_clock(crawler: Any) -> ServerClock:
    """The :class:`ServerClock` of ``crawler`` (one per crawler; the heartbeat keeps it set)."""
    clock = _clocks.get(crawler)
    if clock is None:
        clock = _clocks[crawler] = ServerClock()
    return clock


def node_id_of(crawler: Any) -> str:
    """This process's node id in the crawl, ``<host>:<pid>:<random>``: one per crawler (kept as
    long as the crawler lives), readable in ``redis-cli``, shared by the scheduler (leases), the
    storage pipeline (replays), metrics and JSON logs."""
    node = _node_ids.get(crawler)
    if node is None:
        node = _node_ids[crawler] = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    return node


class Heartbeat:
    """Beat for ``node_id`` every ``interval`` seconds; a node silent for ``timeout`` seconds is
    dead. ``info()`` gives the facts to publish; ``on_dropped()`` is called (from the heartbeat
    thread) when this node finds it had been declared dead; ``on_reclaimed(leases, nodes)`` when
    it took back dead nodes' leases; ``on_state_lost()``, once, when the crawl's ``epoch`` (as
    the node joined it) is gone from Redis or changed, in the meta or in any of
    :meth:`~scrapy_frontier.keys.Keys.epoch_keys` (:attr:`lost_key` names where). ``health``:
    where Redis errors are reported (the crawler's; one of its own by default)."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        node_id: str,
        *,
        interval: float,
        timeout: float,
        start_urls_as_set: bool = False,
        info: Callable[[], dict[str, Any]] = dict,
        on_dropped: Callable[[], None] = lambda: None,
        on_reclaimed: Callable[[int, int], None] = lambda leases, nodes: None,
        clock: ServerClock | None = None,
        health: RedisHealth | None = None,
        epoch: bytes | None = None,
        on_state_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.node_id = node_id
        self.interval = interval
        self.timeout = timeout
        self.start_urls_as_set = start_urls_as_set
        self._info = info
        self._on_dropped = on_dropped
        self._on_reclaimed = on_reclaimed
        #: The crawl's epoch (``epoch`` in ``<spider>:dupefilter:meta``) as this node joined it.
        self.epoch = epoch
        self._on_state_lost = on_state_lost
        #: Whether a beat found the crawl's epoch gone or changed: the crawl's state in Redis is lost.
        self.state_lost = False
        #: The key where the epoch was found gone or changed.
        self.lost_key = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._joined = False
        self._failing = False
        self._beat = client.register_script(source("nodes_beat"))
        self._write_info = client.register_script(source("nodes_info"))
        self.health = health or RedisHealth()
        self._started: int | None = None
        self.clock = clock or ServerClock()
        #: ``scrapy forget`` calls counted at the last beat (``Keys.forgets``; None before).
        self.forgets: bytes | None = None
        #: The nodes in the registry at the last beat, this one included (the dead until reaped).
        self.nodes = 1

    def beat(self) -> bool:
        """Record one heartbeat. Returns False when the node was not in the registry: either it
        is joining, or it had been declared dead (then ``on_dropped`` is called)."""
        info_key = self.keys.node_info(self.node_id)
        sent = time.time()
        added, now, self.nodes = self._beat(keys=[self.keys.nodes], args=[self.node_id])
        self.clock.measured(int(now), sent, time.time())
        # Another hash slot than the registry on a Redis Cluster: a second call, not a transaction.
        if self._started is None:
            self._started = int(now) // 1000
        # started: the server's time at the first beat, as every time status compares
        info = {**self._info(), "beat": now, "started": self._started}
        self._write_info(keys=[info_key], args=[int(self.timeout * 1000), *(v for pair in info.items() for v in pair)])
        shard_epochs = self.keys.epoch_keys()
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.forgets)
            pipe.hget(self.keys.dupefilter_meta, "epoch")
            for key in shard_epochs:
                pipe.get(key)
            forgets, *epochs = pipe.execute()
        self.forgets = forgets or b"0"
        if self.epoch is not None and not self.state_lost:
            lost = [
                key for key, epoch in zip([self.keys.dupefilter_meta, *shard_epochs], epochs) if epoch != self.epoch
            ]
            if lost:
                # Redis restarted empty, or a replica that had not synced was promoted (of the
                # whole crawl, or of one Cluster master's shards): this node was not declared
                # dead, the crawl's state went
                self.lost_key = lost[0]  # before the flag: the scheduler's loop may read both at once
                self.state_lost = True
                self._on_state_lost()
        if added and self._joined and not self.state_lost:
            self._on_dropped()
        self._joined = True
        return not added

    def reclaim(self) -> tuple[int, int]:
        """Return the leases of every node silent for ``timeout`` seconds to the frontier and
        drop those nodes from the registry. Returns (leases, nodes)."""
        restored, nodes = reclaim_dead(
            self.client, self.keys, int(self.timeout * 1000), start_urls_as_set=self.start_urls_as_set
        )
        if restored or nodes:
            self._on_reclaimed(restored, nodes)
        return restored, nodes

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.node_id}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
                self.health.answered()
                self.reclaim()
                if self._failing:
                    self._failing = False
                    logger.warning("Heartbeat: Redis answers again")
            except REDIS_FAILURES as exc:
                # an outage, or dead nodes' leases that Redis at maxmemory cannot take back yet:
                # reported once for the worker
                if self.health.failed(exc):
                    continue
                if not self._failing:
                    self._failing = True
                    logger.error("Heartbeat: Redis error (%s); beating again when it answers", describe_error(exc))
            except Exception:
                logger.exception("Heartbeat error (the worker keeps running)")
