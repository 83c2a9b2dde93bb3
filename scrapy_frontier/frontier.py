"""The shared frontier in Redis: batched enqueue with dedup, leases, acknowledgements, reclaim.

:class:`Frontier` queues requests per host (the push checks and adds their fingerprints to the
shared dupefilter in the same script, so two workers never both queue one URL), takes requests of
the hosts that are due under this node's lease, and acknowledges or gives them back. Nothing
leaves Redis when a worker takes it: it moves to the node's lease hash, atomically. Every call
touches one frontier shard (one Redis Cluster hash slot); a call that spans shards makes one call
per shard, concurrently. Every time that decides something is the Redis server's.

The keys are described in docs/operating.md ("Redis keys") and named by
:class:`scrapy_frontier.keys.Keys`; the scripts are ``scrapy_frontier/lua/frontier_*.lua``. The
class needs only a ``redis.asyncio`` client (``Redis`` or ``RedisCluster``), no crawler.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from redis.exceptions import NoScriptError

from scrapy_frontier.connection import is_cluster
from scrapy_frontier.dupefilter import SEGMENT_BITS, DedupConfig
from scrapy_frontier.keys import START_LEASE_PREFIX, shard_of_host
from scrapy_frontier.payload import START_PREFIX, compact_payload, expand_payload, lease_host
from scrapy_frontier.politeness import autothrottle_start
from scrapy_frontier.reclaim import restore_calls
from scrapy_frontier.scripts import library, source
from scrapy_frontier.status import Status, crawl_counts, flag, make_status, status_calls

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping, Sequence

    from redis.asyncio import Redis, RedisCluster

    from scrapy_frontier.keys import Keys, Shard
    from scrapy_frontier.politeness import SharedAutoThrottle

#: A field of every lease hash that is not a lease: its value, longer than Redis's
#: ``hash-max-listpack-value``, keeps the hash in the hashtable encoding (docs/scripts.md, "Lease hashes").
#: Readers of a lease hash skip it; ``lua/lease_count.lua`` counts the leases without it.
LEASE_MARK = b"@"
#: Shards one refill visits at most, concurrently (a sharded crawl).
LEASE_FANOUT = 4
#: Seen-feed entries one lease call reads at most (each one push call's new fingerprints).
FEED_READ = 100


@dataclass(frozen=True)
class Entry:
    """A request ready for the frontier: fingerprint (hex, or "" to skip dedup), host, score, payload."""

    fingerprint: str
    host: str
    score: int
    payload: str


class Lease(NamedTuple):
    """A request taken under this node's lease (:meth:`Frontier.lease`): ``field``, the lease's
    name in the node's lease hash (``<lease id>\\t<score>\\t<host>``: what acknowledges it,
    :meth:`Frontier.push`, or gives it back, :meth:`Frontier.unlease`), and ``payload``, the
    request's JSON. A host with a rate (:mod:`scrapy_frontier.politeness`) has its sends booked
    by the lease: ``send_in``, the seconds after the lease call's reply when it may be sent
    (``-1``: no booking), ``interval``, the seconds between its host's sends, ``strict``, whether
    a rate rule other than AutoThrottle set it."""

    field: bytes
    payload: bytes
    send_in: float = -1.0
    interval: float = 0.0
    strict: bool = False


def _push_reply(reply: Any, full: dict[int, str] | None, duplicates: list[Any] | None) -> int:
    """The count of a frontier_push reply; with ``duplicates``, the payloads its ARGV indexes
    name (``full``: ARGV index -> the request's JSON) are appended to it."""
    if duplicates is None or full is None:
        return int(reply)
    duplicates.extend(full[int(i)] for i in reply[1:])
    return int(reply[0])


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
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        seen_feed: int = 0,
        lifo: bool = False,
        autothrottle: SharedAutoThrottle | None = None,
    ) -> None:
        """``keys`` with the crawl's shard count (:meth:`Keys.with_shards
        <scrapy_frontier.keys.Keys.with_shards>`); ``dedup``: the dupefilter's layout (exact set
        by default); ``default_rate``: requests/second per host for every worker together (0:
        none; a host's entry in ``<spider>:rates`` and its robots.txt Crawl-delay override it);
        ``concurrency_cap``: requests in flight per host across the cluster (0: none);
        ``wait_replicas``: replicas that must have every push of a page's children (``WAIT``,
        at most ``wait_timeout`` seconds) before its lease, in another shard, is acknowledged
        (0: no wait); ``seen_feed``: entries of the seen feed each shard keeps, about (one
        per push call; 0: no feed, neither written nor read); ``lifo``: each host's new requests are
        served before those queued earlier (of one priority), as the crawl's recorded order says
        (``order`` in ``<spider>:dupefilter:meta``), rather than first in, first out;
        ``autothrottle``: AutoThrottle for the whole crawl (every host then has a rate, ``1 /``
        its delay, and the latencies given to :meth:`push` move the delays)."""
        self.redis = redis
        self.default_rate = default_rate
        self.concurrency_cap = concurrency_cap
        self.autothrottle = autothrottle
        self._at_start = autothrottle_start(autothrottle)
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = max(1, int(wait_timeout * 1000))
        #: Pushes whose WAIT saw fewer than ``wait_replicas`` replicas in time (acknowledged anyway).
        self.wait_short = 0
        self.keys = keys
        self.shards = keys.all_shards()
        self.dedup = (dedup or DedupConfig(exact_layout="set")).per_shard(len(self.shards))
        self.node_id = node_id
        self.lease_key = keys.leases(node_id)
        self.start_lease_key = keys.start_leases(node_id)
        self.start_urls_as_set = start_urls_as_set
        self.seen_feed = seen_feed
        #: Per shard, the last seen-feed entry read ('$': none yet).
        self._feed_last = ["$" if seen_feed else ""] * len(self.shards)
        #: What the other nodes queued, from the seen feed: lists of packed-layout members (or hex
        #: fingerprints in the other layouts) joined by ``,``; the caller empties it.
        self.fed: list[bytes] = []
        #: The nodes index, handed to the push and lease calls on a Redis that is not a cluster
        #: (where it may be of another hash slot than a shard's keys): while it holds this node
        #: alone, the seen feed is neither written nor read (``lua/frontier_push.lua``).
        self._nodes_key = [keys.nodes] if seen_feed and not is_cluster(redis) else []
        self._as_set = flag(start_urls_as_set)
        #: Seconds until a queued host is due, from the last lease call (-1: nothing queued seen).
        self.next_due_in = -1.0
        #: The shard of each lease this node holds (lease field -> shard index).
        self._lease_shard: dict[bytes, int] = {}
        #: Lease calls made, from a random start: each call's lease ids start with its number
        #: (hexadecimal) and a '.', so two frontier objects of one node id never share one.
        self._calls = int.from_bytes(os.urandom(4), "big")
        #: Per shard, when (time.monotonic()) it is next worth a lease call.
        self._shard_due = [0.0] * len(self.shards)
        self._cursor = 0
        order = library("frontier_queue_lifo") if lifo else ""
        self._push = redis.register_script(source("frontier_push", SEGMENT_BITS=SEGMENT_BITS, QUEUE_ORDER=order))
        self._lease = redis.register_script(source("frontier_lease"))
        self._restore = redis.register_script(source("frontier_restore"))
        self._take_start = redis.register_script(source("frontier_take_start"))
        self._unlease = redis.register_script(source("frontier_unlease"))
        self._status = redis.register_script(source("frontier_status"))
        self._revisit_schedule = redis.register_script(source("revisit_schedule"))
        self._revisit_due = redis.register_script(source("revisit_due", QUEUE_ORDER=order))

    def shard_index(self, host: str) -> int:
        return shard_of_host(host, self.keys.shards)

    # -- push and acknowledge ---------------------------------------------------------------

    async def _push_call(
        self,
        sh: Shard,
        entries: Sequence[Entry],
        acks: Sequence[bytes],
        failed: Sequence[str],
        duplicates: list[Any] | None = None,
        samples: Mapping[str, Sequence[int]] | None = None,
    ) -> int:
        keys, args, full = self._push_args(sh, entries, acks, failed, duplicates is not None, samples)
        return _push_reply(await self._push(keys=keys, args=args), full, duplicates)

    def _push_args(
        self,
        sh: Shard,
        entries: Sequence[Entry],
        acks: Sequence[bytes],
        failed: Sequence[str],
        report: bool = False,
        samples: Mapping[str, Sequence[int]] | None = None,
    ) -> tuple[list[str], list[Any], dict[int, str] | None]:
        """KEYS and ARGV of one frontier_push call (its contract: ``lua/frontier_push.lua``):
        the entries grouped by host and priority, each payload in its compact form
        (:func:`compact_payload`), the acknowledgements by host, the AutoThrottle ``samples``
        by host (:meth:`push`). ``report`` asks for the duplicates found; then the third value
        maps each payload's ARGV index (1-based) to the request's JSON (else None)."""
        groups: dict[tuple[str, Any], list[Any]] = {}
        originals: dict[tuple[str, Any], list[str]] = defaultdict(list)
        packed = self.dedup.layout == "packed"
        shards = len(self.shards)
        bucket_prefix = sh.dupefilter + ":"
        for e in entries:
            group = groups.get((e.host, e.score))
            if group is None:
                group = groups[(e.host, e.score)] = []
            payload = compact_payload(e.payload, e.host)
            if not e.fingerprint:
                group += ("", "", payload)
            elif packed:
                bucket, member = self.dedup.packed_bucket(e.fingerprint, shards)
                group += (bucket_prefix + str(bucket), member, payload)
            else:
                group += (e.fingerprint, "", payload)
            if report:
                originals[(e.host, e.score)].append(e.payload)
        ack_groups: dict[bytes, list[bytes]] = defaultdict(list)
        for a in acks:
            # the lease's host, so the script needs no HGET to find it
            ack_groups[lease_host(a)].append(a)
        args: list[Any] = [sh.queue_prefix, len(groups), len(ack_groups), len(failed)]
        full: dict[int, str] | None = {} if report else None
        for key, group in groups.items():
            args += (*key, len(group) // 3)
            if full is not None:  # (dedup key, member, payload) each: the payload's ARGV index, 1-based
                full.update((len(args) + 3 * k + 3, payload) for k, payload in enumerate(originals[key]))
            args += group
        for host, fields in ack_groups.items():
            args += (host, len(fields), *fields)
        args += failed
        if samples and self.autothrottle is not None:
            args += (len(samples), *self.autothrottle.lua_args())
            for sampled, values in samples.items():
                args += (sampled, len(values), *values)
        else:
            args.append(0)
        mode, _, age, capacity, error_rate = self.dedup.lua_args(0)
        args += (
            sh.politeness_prefix,
            sh.bloom_bits_prefix,
            mode,
            age,
            capacity,
            error_rate,
            self.concurrency_cap,
            1 if report else 0,
            self.node_id,
            self.seen_feed,
        )
        failed_key = self.keys.failed if not self.keys.shards else sh.queue
        return (
            [
                sh.dupefilter,
                sh.queue,
                sh.leases(self.node_id),
                failed_key,
                sh.forgotten,
                sh.bloom,
                sh.seen_feed,
                *self._nodes_key,
            ],
            args,
            full,
        )

    async def _replicated(self, pipe_fill: Any, node_key: str) -> list[Any]:
        """Run ``pipe_fill(pipe)``'s commands and then ``WAIT wait_replicas`` on one connection
        (a pipeline: WAIT counts the replicas that have this connection's writes), on the node
        that owns ``node_key``. Returns the replies of the commands; counts a short WAIT in
        :attr:`wait_short`. A script unknown to the node (a promoted replica) is loaded and the
        call made again."""
        for attempt in range(2):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe_fill(pipe)
                if is_cluster(self.redis):
                    pipe.execute_command(
                        "WAIT",
                        self.wait_replicas,
                        self.wait_timeout_ms,
                        target_nodes=cast("RedisCluster", self.redis).get_node_from_key(node_key),
                    )
                else:
                    pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
                try:
                    *replies, replicas = await pipe.execute()
                except NoScriptError:
                    if attempt:
                        raise
                    await self.redis.script_load(self._push.script)
                    continue
            if int(replicas) < self.wait_replicas:
                self.wait_short += 1
            return replies
        raise AssertionError("unreachable")

    async def _push_replicated(
        self, sh: Shard, entries: Sequence[Entry], acks: Sequence[bytes], duplicates: list[Any] | None = None
    ) -> int:
        keys, args, full = self._push_args(sh, entries, acks, [], duplicates is not None)
        # execute_command: redis-py's cluster pipeline refuses its evalsha() method, not the command
        (reply,) = await self._replicated(
            lambda pipe: pipe.execute_command("EVALSHA", self._push.sha, len(keys), *keys, *args), sh.queue
        )
        return _push_reply(reply, full, duplicates)

    async def push(
        self,
        entries: Sequence[Entry],
        acks: Sequence[Lease | bytes | str] = (),
        failed: Sequence[str] = (),
        duplicates: list[Any] | None = None,
        samples: Mapping[str, Sequence[int]] | None = None,
    ) -> int:
        """Queue ``entries`` (skipping fingerprints already seen), then acknowledge the leases
        ``acks`` and push dead letters ``failed``: a lease is never released before the requests
        it produced are queued and its dead letter kept. Within one shard this is one atomic
        script call; across shards the pushes go first (one call per shard, concurrently), then
        the acknowledgements. ``samples``: responses' download latencies by host, in µs (``-1 -
        latency`` for a response that is not a 200), oldest first, for the shared AutoThrottle
        (ignored without one); they ride on the same calls. Returns how many were queued; given
        a list ``duplicates``, appends to it the payload of each entry the dupefilter had seen."""
        if not (entries or acks or failed or samples):
            return 0
        fields = [_field(a) for a in acks]
        if len(self.shards) == 1 and not self.keys.shards:
            # Unsharded: one call, as atomic as it gets (start-URL leases are in the same hash).
            return await self._push_call(self.shards[0], entries, fields, failed, duplicates, samples)
        by_shard: dict[int, list[Entry]] = defaultdict(list)
        for e in entries:
            by_shard[self.shard_index(e.host)].append(e)
        start_acks = [a for a in fields if a.startswith(START_PREFIX)]
        ack_shard: dict[int, list[bytes]] = defaultdict(list)
        for a in fields:
            if not a.startswith(START_PREFIX):
                ack_shard[self._lease_shard.get(a, 0)].append(a)
        # When the pushes touch one shard only, its acknowledgements ride in the same call:
        # one shard is one master, whose replicas get its writes in order. Across shards, with
        # wait_replicas, every push (and the dead letters) is on a replica before any other
        # shard's acknowledgement is sent: a master lost in a failover cannot take the children
        # with it while the parent's acknowledgement, on another master, survives.
        single = next(iter(by_shard)) if len(by_shard) == 1 else None
        riders = ack_shard.pop(single, []) if single is not None else []
        later = bool(ack_shard or start_acks)
        if failed:
            if self.wait_replicas and (later or riders):
                await self._replicated(lambda pipe: pipe.lpush(self.keys.failed, *failed), self.keys.failed)
            else:
                await self.redis.lpush(self.keys.failed, *failed)
        calls = []
        for i, es in by_shard.items():
            acks_here = riders if i == single else []
            if self.wait_replicas and later:
                calls.append(self._push_replicated(self.shards[i], es, acks_here, duplicates))
            else:
                calls.append(self._push_call(self.shards[i], es, acks_here, [], duplicates))
        added = sum(int(n) for n in await asyncio.gather(*calls))
        # a shard pushed to has requests due, and one acknowledged to may have a host back from
        # its concurrency cap (frontier_lease parks a host at its cap until a lease of it ends)
        for i in {*by_shard, *ack_shard}:
            self._shard_due[i] = 0.0
        shard_samples: dict[int, dict[str, Sequence[int]]] = defaultdict(dict)
        for host, values in (samples or {}).items():
            shard_samples[self.shard_index(host)][host] = values
        after: list[Awaitable[Any]] = [
            self._push_call(self.shards[i], [], ack_shard.get(i, []), [], None, shard_samples.get(i))
            for i in set(ack_shard) | set(shard_samples)
        ]
        if start_acks:
            after.append(self.redis.hdel(self.start_lease_key, *start_acks))
        if after:
            await asyncio.gather(*after)
        for a in fields:
            self._lease_shard.pop(a, None)
        return added

    # -- leases -----------------------------------------------------------------------------

    async def lease(self, n: int) -> list[Lease]:
        """Take up to ``n`` requests from the hosts that are due, moving them under this node's
        lease. A sharded crawl visits up to :data:`LEASE_FANOUT` shards that are due, in turn
        from where the last call stopped, so no shard starves. Sets :attr:`next_due_in`."""
        now = time.monotonic()
        count = len(self.shards)
        order = [(self._cursor + j) % count for j in range(count)]
        due = [i for i in order if self._shard_due[i] <= now] or [min(order, key=lambda i: self._shard_due[i])]
        visit = due[:LEASE_FANOUT]
        self._cursor = (visit[-1] + 1) % count
        share = -(-n // len(visit))
        replies = await asyncio.gather(*(self._lease_shard_call(i, share) for i in visit))
        return self._leased(visit, replies, now)

    def _leased(self, visit: Sequence[int], replies: Sequence[tuple[int, list[Lease]]], now: float) -> list[Lease]:
        """The leases of the lease calls to the shards ``visit`` (their replies, in order, made
        at ``now``, time.monotonic()): each shard's next due time and :attr:`next_due_in` set."""
        count = len(self.shards)
        out: list[Lease] = []
        soonest = -1.0
        for i, (due_ms, payloads) in zip(visit, replies):
            if count > 1:  # one shard: every lease is in it, nothing to remember
                for lease in payloads:
                    self._lease_shard[lease.field] = i
            out += payloads
            if due_ms >= 0:
                wait = due_ms / 1000
                soonest = wait if soonest < 0 else min(soonest, wait)
                self._shard_due[i] = now + (0 if payloads else wait)
            else:
                self._shard_due[i] = now + 1.0  # empty: look again in a second (others may push)
        if count > 1:
            pending = [d - now for d in self._shard_due if d > now]
            soonest = min([soonest, *pending]) if soonest >= 0 else (min(pending) if pending else -1.0)
        self.next_due_in = soonest
        return out

    async def _lease_shard_call(self, i: int, n: int) -> tuple[int, list[Lease]]:
        """One shard's lease call: (ms until its earliest host is due, -1 if none; the leases),
        the seen feed's news in :attr:`fed`. The reply's payloads are as the queues store them
        (:func:`expand_payload`), and each lease's field is the call's lease id prefix, its
        place among its host's in the reply (1, 2, ...), its score and host
        (``lua/frontier_lease.lua``)."""
        keys, args, call = self._lease_args(i, n)
        return self._lease_reply(i, call, await self._lease(keys=keys, args=args))

    def _lease_args(self, i: int, n: int) -> tuple[list[str], list[Any], bytes]:
        """KEYS and ARGV of shard ``i``'s frontier_lease call for ``n`` requests, and the
        call's lease id prefix (``lua/frontier_lease.lua``)."""
        sh = self.shards[i]
        self._calls += 1
        call = b"%x." % self._calls
        keys = [sh.queue, sh.leases(self.node_id), sh.rates, sh.seen_feed, *self._nodes_key]
        args = [
            sh.queue_prefix,
            n,
            self.default_rate,
            self.concurrency_cap,
            sh.politeness_prefix,
            self._feed_last[i],
            self.node_id,
            FEED_READ,
            call,
            self._at_start,
            self.autothrottle.target_concurrency if self.autothrottle is not None else 0,
        ]
        return keys, args, call

    def _lease_reply(self, i: int, call: bytes, reply: list[Any]) -> tuple[int, list[Lease]]:
        """(ms until shard ``i``'s earliest host is due, -1 if none; the leases) of a
        frontier_lease reply; the seen feed's news go to :attr:`fed`."""
        due, feed_last, news, *reply = reply
        if self.seen_feed:
            self._feed_last[i] = feed_last.decode()
            self.fed += reply[:news]
        leases: list[Lease] = []
        j = news
        placed: dict[bytes, int] = {}
        while j < len(reply):
            host, score, k, pace = reply[j], reply[j + 1], int(reply[j + 2]), reply[j + 3]
            suffix = b"\t" + score + b"\t" + host
            n = placed.get(host, 0)
            strict = not pace.endswith(b"a")
            interval = float(pace.rstrip(b"a")) / 1e6
            for stored in reply[j + 4 : j + 4 + k]:
                n += 1
                field, payload = b"%s%d%s" % (call, n, suffix), expand_payload(stored, host)
                if interval:
                    leases.append(Lease(field, payload, (n - 1) * interval, interval, strict))
                else:
                    leases.append(Lease(field, payload))
            placed[host] = n
            j += 4 + k
        return int(float(due)), leases

    @property
    def one_call(self) -> bool:
        """Whether :meth:`push_lease` can push and lease in one round trip: an unsharded
        frontier (one script call each) on a Redis that is not a cluster."""
        return len(self.shards) == 1 and not self.keys.shards and not is_cluster(self.redis)

    async def push_lease(
        self,
        entries: Sequence[Entry],
        acks: Sequence[Lease | bytes | str],
        failed: Sequence[str],
        duplicates: list[Any] | None,
        n: int,
        samples: Mapping[str, Sequence[int]] | None = None,
    ) -> tuple[int | Exception, list[Lease] | Exception]:
        """:meth:`push` and then :meth:`lease` ``(n)`` in one round trip (:attr:`one_call`
        only): the two script calls sent together, the push first, so that Redis runs them in
        that order and the lease can take what the push queued. A round trip costs Redis far
        more than either call's commands on some machines (tens of µs: bench/README.md), and a
        worker makes one of these a step instead of two.

        Returns (the count queued, the leases), either one the exception its call raised
        instead, as ``asyncio.gather(..., return_exceptions=True)`` does: a lease taken when
        the push failed is the caller's all the same (and the other way round). A script
        Redis does not know (a restarted Redis) is loaded and its call made again. Raises
        what the round trip raises (an outage: either call may have run; a lease this node
        does not know of is given back by the scheduler's reconcile)."""
        sh = self.shards[0]
        fields = [_field(a) for a in acks]
        push_keys, push_args, full = self._push_args(sh, entries, fields, failed, duplicates is not None, samples)
        lease_keys, lease_args, call = self._lease_args(0, n)
        now = time.monotonic()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVALSHA", self._push.sha, len(push_keys), *push_keys, *push_args)
            pipe.execute_command("EVALSHA", self._lease.sha, len(lease_keys), *lease_keys, *lease_args)
            pushed, leased = await pipe.execute(raise_on_error=False)
        if isinstance(pushed, NoScriptError):
            pushed = await self._push(keys=push_keys, args=push_args)
        if isinstance(leased, NoScriptError):
            leased = await self._lease(keys=lease_keys, args=lease_args)
        added: int | Exception = pushed if isinstance(pushed, Exception) else _push_reply(pushed, full, duplicates)
        if isinstance(leased, Exception):
            return added, leased
        return added, self._leased([0], [self._lease_reply(0, call, leased)], now)

    async def unlease(self, fields: Sequence[Lease | bytes]) -> int:
        """Return these leases of this node (their fields, :class:`Lease`) to the frontier
        (requests not started, or leases it did not know it held); a start-URL lease goes back
        to the start URLs. Returns how many were held."""
        if not fields:
            return 0
        groups: dict[int, list[bytes]] = defaultdict(list)
        starts = []
        for p in map(_field, fields):
            if self.keys.shards and p.startswith(START_PREFIX):
                starts.append(p)
            else:
                groups[self._lease_shard.pop(p, 0)].append(p)
        calls = []
        for i, fields in groups.items():
            sh = self.shards[i]
            start = self.keys.start_urls if not self.keys.shards else sh.queue
            calls.append(
                self._unlease(
                    keys=[sh.queue, sh.leases(self.node_id), start],
                    args=[sh.queue_prefix, sh.politeness_prefix, START_LEASE_PREFIX, self._as_set, *fields],
                )
            )
        if starts:
            calls.append(
                self._unlease(
                    keys=[self.keys.start_urls, self.start_lease_key, self.keys.start_urls],
                    args=["", "", START_LEASE_PREFIX, self._as_set, *starts],
                )
            )
        return sum(int(n) for n in await asyncio.gather(*calls))

    async def lease_fields(self) -> set[bytes]:
        """Every lease Redis holds for this node (lease fields, :class:`Lease`, and
        :data:`START_PREFIX` + raw for start URLs), from every shard. A field found in a shard is remembered there,
        so :meth:`unlease` gives it back to the right one."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for sh in self.shards:
                pipe.hkeys(sh.leases(self.node_id))
            if self.keys.shards:
                pipe.hkeys(self.start_lease_key)
            replies = await pipe.execute()
        out: set[bytes] = set()
        for i, fields in enumerate(replies[: len(self.shards)]):
            if len(self.shards) > 1:
                for f in fields:
                    self._lease_shard.setdefault(f, i)
            out.update(fields)
        for fields in replies[len(self.shards) :]:
            out.update(fields)
        out.discard(LEASE_MARK)
        return out

    async def take_start_urls(self, n: int) -> list[bytes]:
        """Take up to ``n`` raw start-URL payloads (oldest first), moving them under this node's lease.
        Acknowledge each with ``START_PREFIX + raw`` once its request is queued or refused."""
        return await self._take_start(
            keys=[self.keys.start_urls, self.start_lease_key], args=[n, self._as_set, START_LEASE_PREFIX]
        )

    async def release(self) -> int:
        """Return every lease of this node to the frontier, and the pending items it was
        replaying to the pending list (used when the node stops). Returns the count."""
        calls = [
            self._restore(keys=k, args=a) for k, a in restore_calls(self.keys, [self.node_id], self.start_urls_as_set)
        ]
        restored = sum(int(n) for n in await asyncio.gather(*calls))
        replaying = self.keys.items_replaying(self.node_id)
        # LMOVE is refused at maxmemory even on an empty list; the lease restores are not
        # (frontier_restore runs at maxmemory), so a node with no items in hand leaves anyway
        while await self.redis.exists(replaying) and await self.redis.lmove(
            replaying, self.keys.items_pending, "LEFT", "RIGHT"
        ):
            restored += 1
        self._lease_shard.clear()
        return restored

    async def schedule(self, revisits: Sequence[tuple[str, list[Any]]]) -> None:
        """Put each ``(host, values)`` (:func:`~scrapy_frontier.revisit.schedule_args`) in the
        revisit schedule of its host's shard, due that many seconds from now (Redis time). One
        script call per shard (``lua/revisit_schedule.lua``)."""
        by_shard: dict[int, list[Any]] = defaultdict(list)
        for host, args in revisits:
            by_shard[self.shard_index(host)] += args
        shards = self.shards
        await asyncio.gather(
            *(
                self._revisit_schedule(
                    keys=[
                        shards[i].revisit_wheel,
                        shards[i].revisit_meta,
                        shards[i].revisit_templates,
                        shards[i].revisit_superseded,
                    ],
                    args=[shards[i].revisit + "b:", *args],
                )
                for i, args in by_shard.items()
            )
        )

    async def queue_due(self, most: int = 500, window: float = 60.0, keep: float = 400 * 86400) -> tuple[int, float]:
        """Move the scheduled revisits that are due into their hosts' queues, at least ``most`` per
        shard when due, whole parts at a time (``lua/revisit_due.lua``). ``window``: seconds within
        which a second record of a page is a duplicate and dropped (less than the shortest
        interval); ``keep``: seconds a superseded fingerprint is remembered (more than the longest
        interval). Returns (pages moved, seconds until the next one is due, ``-1`` when none is
        scheduled)."""
        replies = await asyncio.gather(
            *(
                self._revisit_due(
                    keys=[
                        sh.revisit_wheel,
                        sh.revisit_meta,
                        sh.revisit_templates,
                        sh.revisit_superseded,
                        sh.revisit_moved,
                        sh.queue,
                        sh.revisit_due,
                        sh.revisit_requests,
                    ],
                    args=[sh.revisit + "b:", sh.queue_prefix, most, round(window * 1000), round(keep * 1000)],
                )
                for sh in self.shards
            )
        )
        moved = sum(int(r[0]) for r in replies)
        waits = [int(r[1]) for r in replies if int(r[1]) >= 0]
        return moved, (min(waits) / 1000 if waits else -1.0)

    async def leave(self) -> None:
        """Remove this node from the registry (after :meth:`release`)."""
        await self.redis.zrem(self.keys.nodes, self.node_id)
        await self.redis.delete(self.keys.node_info(self.node_id))

    async def status(self, *, deep: bool = False) -> Status:
        """Counts for idle detection and for ``scrapy status``, every shard summed; ``deep`` also
        reads the queued requests (each shard's count; one that has none yet is counted host by
        host once, so it is skipped in the idle check)."""
        nodes = cast("list[bytes]", await self.redis.zrange(self.keys.nodes, 0, -1))
        async with self.redis.pipeline(transaction=False) as pipe:
            crawl_counts(pipe, self.keys, self.start_urls_as_set, nodes)
            crawl_reads = pipe.execute()
            counts, crawl = await asyncio.gather(
                asyncio.gather(*(self._status(keys=k, args=a) for k, a in status_calls(self.keys, nodes, deep))),
                crawl_reads,
            )
        return make_status(nodes, counts, crawl)

    async def clear(self, *, leases: bool = False) -> None:
        """Delete the queues, dupefilter (every layout, and its meta), per-host politeness state and
        shared cookies of this crawl (SCHEDULER_PERSIST=False, last node), and with ``leases`` every node's leases and
        start-URL leases (SCHEDULER_FLUSH_ON_START). Live rates (``<spider>:rates``) stay: they
        are configuration."""
        k = self.keys
        keys: list[Any] = [k.dupefilter_meta, k.forgets, k.scrapy_redis_queue, k.scrapy_redis_lock, k.cookies]
        # every host's priorities and lists, the Bloom bits, the packed buckets and their count,
        # the per-host politeness state; the dead letters (<spider>:requests:failed) stay
        prefixes: list[str] = []
        for sh in self.shards:
            keys += [sh.queue, sh.dupefilter, sh.bloom, sh.forgotten]
            if k.shards:
                keys.append(sh.rates)
            prefixes += [sh.queue_prefix, sh.dupefilter + ":", sh.politeness_prefix]
            if leases:
                prefixes.append(sh.lease_prefix)
        if leases and k.shards:
            prefixes.append(k.start_leases(""))
        keys += [key for key in await self._scan_prefixes(prefixes) if key != k.failed.encode()]
        for i in range(0, len(keys), 500):
            await self.redis.unlink(*keys[i : i + 500])

    async def _scan_prefixes(self, prefixes: Sequence[str]) -> list[bytes]:
        """The keys that start with one of ``prefixes``: one SCAN of what they have in common
        (the crawl's name, with the default key names), not one pass over the keyspace each;
        one each when they share nothing."""
        common = os.path.commonprefix(list(prefixes))
        matches = [common] if common else list(prefixes)
        wanted = tuple(p.encode() for p in prefixes)
        return [
            key
            for m in matches
            async for key in self.redis.scan_iter(match=_glob(m) + "*", count=1000)
            if key.startswith(wanted)
        ]


def _field(lease: Lease | bytes | str) -> bytes:
    """A lease's field, given the :class:`Lease` or the field."""
    if isinstance(lease, Lease):
        return lease.field
    return lease if isinstance(lease, bytes) else lease.encode()


def _glob(prefix: str) -> str:
    """``prefix`` with Redis glob characters escaped (a shard's hash tag has none, a host may)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
