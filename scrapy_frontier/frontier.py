"""The shared frontier in Redis: batched enqueue with dedup, leases, acknowledgements, reclaim.

Layout (names from :class:`scrapy_frontier.keys.Keys`):

- ``<spider>:requests`` - sorted set of hosts that have queued requests, score = the time (Unix
  ms) the host may next be served. Taking requests walks the hosts that are due, a few from each,
  so a host with a long queue never holds back the others.
- ``<spider>:requests:<host>`` - sorted set of serialized requests, score = -priority.
- ``<spider>:dupefilter`` - set of request fingerprints (hex), checked and added atomically in
  the same script that queues the request, so two workers never both queue one URL.
- ``<spider>:leases:<node>`` - hash of the requests a node has taken and not yet acknowledged:
  payload -> ``score<TAB>host`` (host empty for a raw start-URL entry, field ``start:<raw>``).
  Nothing leaves Redis when a worker takes it; it moves here, atomically.
- ``<spider>:nodes`` - sorted set of node ids, score = last heartbeat (Unix ms), and
  ``<spider>:nodes:<node>`` a hash of facts about the node, with a TTL. The heartbeat
  (:mod:`scrapy_frontier.nodes`) reclaims dead nodes' leases with :func:`reclaim_dead`.

Every method is one round trip (one Lua script or one pipeline), whatever the batch size.
The class needs only a ``redis.asyncio`` client: no crawler, so it is tested on its own.
The scripts are the files ``scrapy_frontier/lua/frontier_*.lua``, each opening with its KEYS
and ARGV; the push script includes the dupefilter's check (``dupefilter_seen.lua``), the lease
script the politeness rate rule (``politeness_policy.lua``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_frontier.dupefilter import SEGMENT_BITS, DedupConfig
from scrapy_frontier.keys import START_LEASE_PREFIX
from scrapy_frontier.scripts import source

if TYPE_CHECKING:
    from collections.abc import Sequence

    import redis as sync_redis
    from redis.asyncio import Redis

    from scrapy_frontier.keys import Keys

#: Field prefix of a raw start-URL payload held under lease (:data:`scrapy_frontier.keys.START_LEASE_PREFIX`).
START_PREFIX = START_LEASE_PREFIX.encode()


@dataclass(frozen=True)
class Entry:
    """A request ready for the frontier: fingerprint (hex, or "" to skip dedup), host, score, payload."""

    fingerprint: str
    host: str
    score: int
    payload: str


@dataclass(frozen=True)
class Status:
    hosts: int
    depth: int
    inflight: int
    nodes: int
    start_urls: int
    seen: int
    failed: int

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing in flight, no start URL waiting: the crawl has nothing left."""
        return not (self.hosts or self.inflight or self.start_urls)


def _status_args(keys: Keys, *, deep: bool, start_urls_as_set: bool) -> tuple[list[str], list[str]]:
    """The ``keys`` and ``args`` of ``lua/frontier_status.lua``."""
    return (
        [keys.slots, keys.nodes, keys.start_urls, keys.dupefilter, keys.failed, keys.bloom],
        [keys.queue_prefix, keys.lease_prefix, "1" if deep else "0", "1" if start_urls_as_set else "0"],
    )


def _restore_args(keys: Keys, *, mode: str, arg: str | int, start_urls_as_set: bool) -> tuple[list[str], list[str | int]]:
    """The ``keys`` and ``args`` of ``lua/frontier_restore.lua``: ``mode`` ``node`` (``arg`` = a
    node id) or ``dead`` (``arg`` = the heartbeat deadline, Unix ms)."""
    return (
        [keys.slots, keys.nodes, keys.start_urls, keys.items_pending],
        [
            keys.queue_prefix,
            keys.lease_prefix,
            now_ms(),
            "1" if start_urls_as_set else "0",
            mode,
            arg,
            keys.politeness_prefix,
            START_LEASE_PREFIX,
            keys.node_info_prefix,
            keys.items_replaying_prefix,
        ],
    )


def read_status(client: sync_redis.Redis, keys: Keys, *, deep: bool = True, start_urls_as_set: bool = False) -> Status:
    """The :class:`Status` of a crawl, read with a blocking client (``scrapy status``) in one
    script call; ``deep`` also counts queued requests (one ZCARD per host)."""
    script_keys, args = _status_args(keys, deep=deep, start_urls_as_set=start_urls_as_set)
    values = client.register_script(source("frontier_status"))(keys=script_keys, args=args)
    return Status(*(int(v) for v in values))


def reclaim_dead(client: sync_redis.Redis, keys: Keys, deadline_ms: int, *, start_urls_as_set: bool = False) -> tuple[int, int]:
    """With a blocking client (the heartbeat thread, :mod:`scrapy_frontier.nodes`): return to the
    frontier the leases of every node whose last heartbeat is older than ``deadline_ms`` (Unix
    ms), and the pending items it was replaying to the pending list; drop those nodes from the
    registry. One script call, atomic. Returns (leases and items restored, nodes dropped)."""
    script_keys, args = _restore_args(keys, mode="dead", arg=deadline_ms, start_urls_as_set=start_urls_as_set)
    restored, nodes = client.register_script(source("frontier_restore"))(keys=script_keys, args=args)
    return int(restored), int(nodes)


def now_ms() -> int:
    return int(time.time() * 1000)


def slot_of(host: str | None) -> str:
    """The frontier queue name of a host: the host itself (``failed`` becomes ``failed.``, the same
    host in DNS, so that ``<spider>:requests:failed`` stays the dead-letter list)."""
    host = (host or "").lower()
    return host + "." if host == "failed" else host


class Frontier:
    """One crawl's frontier, seen from one node."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        node_id: str,
        *,
        start_urls_as_set: bool = False,
        default_rate: float = 0.0,
        concurrency_cap: int = 0,
        dedup: DedupConfig | None = None,
    ) -> None:
        """``dedup``: the dupefilter's layout (exact set by default);
        ``default_rate``: requests/second per host for every worker together (0: none; a
        host's entry in ``<spider>:rates`` and its robots.txt Crawl-delay override it);
        ``concurrency_cap``: requests in flight per host across the cluster (0: none)."""
        self.redis = redis
        self.default_rate = default_rate
        self.concurrency_cap = concurrency_cap
        self.next_due_ms = -1
        self.keys = keys
        self.dedup = dedup or DedupConfig()
        self.node_id = node_id
        self.lease_key = keys.leases(node_id)
        self._as_set = "1" if start_urls_as_set else "0"
        self._push = redis.register_script(source("frontier_push", SEGMENT_BITS=SEGMENT_BITS))
        self._lease = redis.register_script(source("frontier_lease"))
        self._restore = redis.register_script(source("frontier_restore"))
        self._take_start = redis.register_script(source("frontier_take_start"))
        self._unlease = redis.register_script(source("frontier_unlease"))
        self._status = redis.register_script(source("frontier_status"))

    async def push(self, entries: Sequence[Entry], acks: Sequence[bytes | str] = (), failed: Sequence[str] = ()) -> int:
        """Queue ``entries`` (skipping fingerprints already seen), then acknowledge the leases
        ``acks`` and push dead letters ``failed``, all atomically and in that order: a lease is
        never released before the requests it produced are queued. Returns how many were queued.
        """
        args: list[str | bytes | int] = [self.keys.queue_prefix, now_ms(), len(entries), len(acks), len(failed)]
        for e in entries:
            args += (e.fingerprint, e.host, e.score, e.payload)
        args += acks
        args += failed
        k = self.keys
        mode, _, age, capacity, error_rate = self.dedup.lua_args(0)
        args += (k.politeness_prefix, k.bloom_bits_prefix, mode, age, capacity, error_rate)
        return int(await self._push(keys=[k.dupefilter, k.slots, self.lease_key, k.failed, k.forgotten, k.bloom], args=args))

    async def lease(self, n: int) -> list[bytes]:
        """Take up to ``n`` requests from the hosts that are due, moving them under this node's
        lease. Sets :attr:`next_due_ms`: when the earliest queued host is due (Unix ms; -1: none)."""
        k = self.keys
        due, *payloads = await self._lease(
            keys=[k.slots, self.lease_key, k.rates],
            args=[k.queue_prefix, now_ms(), n, self.default_rate, self.concurrency_cap, k.politeness_prefix],
        )
        self.next_due_ms = int(float(due))
        return payloads

    async def unlease(self, payloads: Sequence[bytes]) -> int:
        """Return these leased requests of this node to the frontier (they were not started)."""
        if not payloads:
            return 0
        k = self.keys
        return int(await self._unlease(keys=[k.slots, self.lease_key, k.start_urls], args=[k.queue_prefix, now_ms(), k.politeness_prefix, START_LEASE_PREFIX, self._as_set, *payloads]))

    async def lease_fields(self) -> set[bytes]:
        """The fields of this node's lease hash: every lease Redis holds for it (request payloads,
        and :data:`START_PREFIX` + raw for start URLs)."""
        return set(await self.redis.hkeys(self.lease_key))

    async def take_start_urls(self, n: int) -> list[bytes]:
        """Take up to ``n`` raw start-URL payloads (oldest first), moving them under this node's lease.
        Acknowledge each with ``START_PREFIX + raw`` once its request is queued or refused."""
        return await self._take_start(keys=[self.keys.start_urls, self.lease_key], args=[n, self._as_set, START_LEASE_PREFIX])

    async def release(self) -> int:
        """Return every lease of this node to the frontier (used when the node stops). Returns the count."""
        keys, args = _restore_args(self.keys, mode="node", arg=self.node_id, start_urls_as_set=self._as_set == "1")
        restored, _ = await self._restore(keys=keys, args=args)
        return int(restored)

    async def leave(self) -> None:
        """Remove this node from the registry (after :meth:`release`)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.nodes, self.node_id)
            pipe.delete(self.keys.node_info(self.node_id))
            await pipe.execute()

    async def status(self, *, deep: bool = False) -> Status:
        """Counts for idle detection and for ``scrapy status``; ``deep`` also counts queued requests
        (one ZCARD per host, so it is skipped in the idle check)."""
        keys, args = _status_args(self.keys, deep=deep, start_urls_as_set=self._as_set == "1")
        return Status(*(int(v) for v in await self._status(keys=keys, args=args)))

    async def clear(self) -> None:
        """Delete the queues, dupefilter (every layout, and its meta) and per-host politeness state of this crawl
        (SCHEDULER_PERSIST=False, last node). Live rates (``<spider>:rates``) stay: they are
        configuration."""
        hosts = await self.redis.zrange(self.keys.slots, 0, -1)
        k = self.keys
        keys = [k.queue_prefix.encode() + h for h in hosts] + [k.slots, k.dupefilter, k.dupefilter_meta, k.bloom, k.forgotten]
        keys += [key async for key in self.redis.scan_iter(match=k.bloom_bits_prefix + "*", count=1000)]
        keys += [k async for k in self.redis.scan_iter(match=self.keys.politeness_prefix + "*", count=1000)]
        await self.redis.delete(*keys)
