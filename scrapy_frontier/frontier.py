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
  ``<spider>:nodes:<node>`` a hash of facts about the node, with a TTL. Heartbeats and the
  reclaim of dead nodes' leases are in :mod:`scrapy_frontier.nodes`.

Every method is one round trip (one Lua script or one pipeline), whatever the batch size.
The class needs only a ``redis.asyncio`` client: no crawler, so it is tested on its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_frontier.dupefilter import LUA_SEEN, DedupConfig

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis

    from scrapy_frontier.keys import Keys

#: Field prefix of a raw start-URL payload held under lease.
START_PREFIX = b"start:"

_PUSH = (
    """
-- KEYS: dupefilter, slots index, lease hash, failed list, forgotten set, bloom hash
-- ARGV: queue prefix, now ms, n_push, n_ack, n_failed,
--       n_push x (fingerprint or '', host, score, payload), n_ack x field, n_failed x entry,
--       politeness prefix, dedup layout, age ms, bloom capacity, bloom error rate
local prefix, now = ARGV[1], ARGV[2]
local D, FORGOTTEN, BLOOM = KEYS[1], KEYS[5], KEYS[6]
local pprefix, MODE, AGE, CAP0, ERR = ARGV[#ARGV - 4], ARGV[#ARGV - 3], tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])
local NOW = tonumber(now)
"""
    + LUA_SEEN
    + """
local np, na, nf = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local added = 0
local i = 6
for _ = 1, np do
  local fp = ARGV[i]
  if fp == '' or seen_add(fp) then
    redis.call('ZADD', prefix .. ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
    redis.call('ZADD', KEYS[2], 'NX', now, ARGV[i + 1])
    added = added + 1
  end
  i = i + 4
end
bloom_flush()
for _ = 1, na do
  local val = redis.call('HGET', KEYS[3], ARGV[i])
  if val then
    local host = string.sub(val, string.find(val, '\\t', 1, true) + 1)
    if host ~= '' then redis.call('HINCRBY', pprefix .. host, 'inflight', -1) end
    redis.call('HDEL', KEYS[3], ARGV[i])
  end
  i = i + 1
end
for _ = 1, nf do
  redis.call('LPUSH', KEYS[4], ARGV[i])
  i = i + 1
end
return added
"""
)

_LEASE = """
-- KEYS: slots index, lease hash, rate overrides hash.
-- ARGV: queue prefix, now ms, n, default rate (requests/s, 0 = none), concurrency cap per host
--       (0 = none), politeness prefix (+ host = the host's politeness hash).
-- Walks the due hosts, an equal share from each; a host with fewer requests than its share
-- leaves the rest to the hosts after it, and a second round fills what is still missing.
-- Politeness, shared by every worker: a host with a rate gives one request per 1/rate seconds
-- (the host's 'next' time), a paused host (Retry-After) nothing before 'pause_until', a host at
-- its concurrency cap nothing until a lease of it ends. Such a host is re-scored to the time it
-- is due, so it never holds back the others.
local prefix, now, want = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local default_rate, cap, pprefix = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local function num(v) return tonumber(v or '') end
local function policy(host)
  local st = redis.call('HMGET', pprefix .. host, 'next', 'factor', 'pause_until', 'robots_delay', 'inflight', 'base_rate')
  local rate = num(redis.call('HGET', KEYS[3], host)) or default_rate
  local robots = num(st[4])
  if robots and robots > 0 and (rate <= 0 or 1 / robots < rate) then rate = 1 / robots end
  local factor = num(st[2]) or 1
  if rate <= 0 and factor < 1 then rate = num(st[6]) or 0 end
  if rate > 0 then rate = rate * factor end
  return rate, math.max(num(st[1]) or 0, num(st[3]) or 0), num(st[5]) or 0
end
local hosts = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, want)
local out = {}
local left = hosts
while want > 0 and #left > 0 do
  local next_round = {}
  for idx, host in ipairs(left) do
    local take = math.ceil(want / (#left - idx + 1))
    local rate, due, inflight = policy(host)
    if due > now then
      redis.call('ZADD', KEYS[1], due, host)
      take = 0
    elseif cap > 0 and inflight >= cap then
      redis.call('ZADD', KEYS[1], now + 200, host)
      take = 0
    end
    if take > 0 then
      if rate > 0 then take = 1 end
      if cap > 0 then take = math.min(take, cap - inflight) end
      local q = prefix .. host
      local got = redis.call('ZPOPMIN', q, take)
      for j = 1, #got, 2 do
        redis.call('HSET', KEYS[2], got[j], got[j + 1] .. '\\t' .. host)
        out[#out + 1] = got[j]
      end
      want = want - #got / 2
      redis.call('HINCRBY', pprefix .. host, 'inflight', #got / 2)
      local ready = now
      if rate > 0 then
        ready = now + math.ceil(1000 / rate)
        redis.call('HSET', pprefix .. host, 'next', ready)
      end
      if redis.call('EXISTS', q) == 0 then
        redis.call('ZREM', KEYS[1], host)
      else
        redis.call('ZADD', KEYS[1], ready, host)
        if ready <= now and (cap <= 0 or inflight + #got / 2 < cap) then next_round[#next_round + 1] = host end
      end
    end
    if want <= 0 then break end
  end
  if #next_round == #left and want > 0 and #out == 0 then break end
  left = next_round
end
-- First element: when the earliest host is due (Unix ms, -1 if none), so an idle worker can
-- sleep until then instead of polling.
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
table.insert(out, 1, first[2] or '-1')
return out
"""

# Put every lease of the given nodes back where it came from, and forget the nodes.
_RESTORE = """
-- KEYS: slots index, nodes zset, start_urls, pending items list.
-- ARGV: queue prefix, lease prefix, now ms, start urls as set (1/0), mode, arg, politeness prefix
--   mode 'node': arg = node id;  mode 'dead': arg = deadline ms (nodes that beat before it)
-- A node's items being replayed from the pending list (<pending>:<node>) go back there too.
local prefix, lease_prefix, now, as_set = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local nodes
if ARGV[5] == 'node' then nodes = {ARGV[6]} else
  nodes = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[6])
end
local restored = 0
for _, node in ipairs(nodes) do
  local h = lease_prefix .. node
  local all = redis.call('HGETALL', h)
  for j = 1, #all, 2 do
    local member, val = all[j], all[j + 1]
    local tab = string.find(val, '\\t', 1, true)
    local score, host = string.sub(val, 1, tab - 1), string.sub(val, tab + 1)
    if host == '' then
      local raw = string.sub(member, 7)
      if as_set == '1' then redis.call('SADD', KEYS[3], raw) else redis.call('RPUSH', KEYS[3], raw) end
    else
      redis.call('ZADD', prefix .. host, score, member)
      redis.call('ZADD', KEYS[1], 'NX', now, host)
      redis.call('HINCRBY', ARGV[7] .. host, 'inflight', -1)
    end
    restored = restored + 1
  end
  redis.call('DEL', h)
  local replaying = KEYS[4] .. ':' .. node
  while redis.call('LMOVE', replaying, KEYS[4], 'LEFT', 'RIGHT') do restored = restored + 1 end
  if ARGV[5] == 'dead' then
    redis.call('ZREM', KEYS[2], node)
    redis.call('DEL', KEYS[2] .. ':' .. node)
  end
end
return {restored, #nodes}
"""

_UNLEASE = """
-- KEYS: slots index, lease hash.  ARGV: queue prefix, now ms, politeness prefix, payloads...
-- Give back some of this node's leases (requests it took but will not start).
local n = 0
for i = 4, #ARGV do
  local val = redis.call('HGET', KEYS[2], ARGV[i])
  if val then
    local tab = string.find(val, '\\t', 1, true)
    local host = string.sub(val, tab + 1)
    redis.call('ZADD', ARGV[1] .. host, string.sub(val, 1, tab - 1), ARGV[i])
    redis.call('ZADD', KEYS[1], 'NX', ARGV[2], host)
    redis.call('HINCRBY', ARGV[3] .. host, 'inflight', -1)
    redis.call('HDEL', KEYS[2], ARGV[i])
    n = n + 1
  end
end
return n
"""

_TAKE_START = """
-- KEYS: start_urls, lease hash.  ARGV: n, as set (1/0)
local got
if ARGV[2] == '1' then got = redis.call('SPOP', KEYS[1], ARGV[1])
else got = redis.call('RPOP', KEYS[1], ARGV[1]) end
if not got then return {} end
for _, raw in ipairs(got) do redis.call('HSET', KEYS[2], 'start:' .. raw, '\\t') end
return got
"""

_STATUS = """
-- KEYS: slots index, nodes zset, start_urls, dupefilter, failed, bloom hash.
-- ARGV: queue prefix, lease prefix, deep (1: count every host queue), start urls as set
local hosts = redis.call('ZCARD', KEYS[1])
local depth = 0
if ARGV[3] == '1' then
  for _, host in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    depth = depth + redis.call('ZCARD', ARGV[1] .. host)
  end
end
local inflight = 0
local nodes = redis.call('ZRANGE', KEYS[2], 0, -1)
for _, node in ipairs(nodes) do inflight = inflight + redis.call('HLEN', ARGV[2] .. node) end
local starts
if ARGV[4] == '1' then starts = redis.call('SCARD', KEYS[3]) else starts = redis.call('LLEN', KEYS[3]) end
local kind, seen = redis.call('TYPE', KEYS[4]).ok, 0
if kind == 'set' then seen = redis.call('SCARD', KEYS[4])
elseif kind == 'zset' then seen = redis.call('ZCARD', KEYS[4])
else seen = tonumber(redis.call('HGET', KEYS[6], 'count') or '0') end
return {hosts, depth, inflight, #nodes, starts, seen, redis.call('LLEN', KEYS[5])}
"""


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


def status_call(keys: Keys, *, deep: bool, start_urls_as_set: bool) -> tuple[list[str], list[str]]:
    """The ``keys`` and ``args`` of the :data:`_STATUS` script, for :meth:`Frontier.status` and
    for a sync client (``scrapy status``)."""
    return (
        [keys.slots, keys.nodes, keys.start_urls, keys.dupefilter, keys.failed, keys.bloom],
        [keys.queue_prefix, keys.lease_prefix, "1" if deep else "0", "1" if start_urls_as_set else "0"],
    )


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
        self._push = redis.register_script(_PUSH)
        self._lease = redis.register_script(_LEASE)
        self._restore = redis.register_script(_RESTORE)
        self._take_start = redis.register_script(_TAKE_START)
        self._unlease = redis.register_script(_UNLEASE)
        self._status = redis.register_script(_STATUS)

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
        args += (k.politeness_prefix, mode, age, capacity, error_rate)
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
        return int(await self._unlease(keys=[self.keys.slots, self.lease_key], args=[self.keys.queue_prefix, now_ms(), self.keys.politeness_prefix, *payloads]))

    async def take_start_urls(self, n: int) -> list[bytes]:
        """Take up to ``n`` raw start-URL payloads (oldest first), moving them under this node's lease.
        Acknowledge each with ``START_PREFIX + raw`` once its request is queued or refused."""
        return await self._take_start(keys=[self.keys.start_urls, self.lease_key], args=[n, self._as_set])

    async def release(self) -> int:
        """Return every lease of this node to the frontier (used when the node stops). Returns the count."""
        restored, _ = await self._restore(
            keys=[self.keys.slots, self.keys.nodes, self.keys.start_urls, self.keys.items_pending],
            args=[self.keys.queue_prefix, self.keys.lease_prefix, now_ms(), self._as_set, "node", self.node_id, self.keys.politeness_prefix],
        )
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
        keys, args = status_call(self.keys, deep=deep, start_urls_as_set=self._as_set == "1")
        return Status(*(int(v) for v in await self._status(keys=keys, args=args)))

    async def clear(self) -> None:
        """Delete the queues, dupefilter (every layout, and its meta) and per-host politeness state of this crawl
        (SCHEDULER_PERSIST=False, last node). Live rates (``<spider>:rates``) stay: they are
        configuration."""
        hosts = await self.redis.zrange(self.keys.slots, 0, -1)
        k = self.keys
        keys = [k.queue_prefix.encode() + h for h in hosts] + [k.slots, k.dupefilter, k.dupefilter_meta, k.bloom, k.forgotten]
        keys += [key async for key in self.redis.scan_iter(match=k.bloom + ":*", count=1000)]
        keys += [k async for k in self.redis.scan_iter(match=self.keys.politeness_prefix + "*", count=1000)]
        await self.redis.delete(*keys)
