"""The shared dupefilter: which requests the crawl has already queued, checked and updated in the
same Lua call that queues new requests (:mod:`scrapy_frontier.frontier`).

Three layouts of ``<spider>:dupefilter`` (setting ``DUPEFILTER_MODE``):

- ``exact`` (default): a set of hex fingerprints, as scrapy-redis's ``RFPDupeFilter`` writes
  it, so a scrapy-redis crawl's dupefilter carries over. About 90 bytes of Redis memory per URL.
- ``exact`` with ``DUPEFILTER_RECRAWL_AGE`` (seconds): a sorted set, score = when the
  fingerprint was last queued (Unix ms); a request seen longer ago than the age is queued again.
- ``bloom``: a scalable Bloom filter (Almeida et al., "Scalable Bloom Filters", 2007): filter
  ``i`` holds ``DUPEFILTER_BLOOM_CAPACITY * 2**i`` fingerprints at a false-positive rate of
  ``DUPEFILTER_BLOOM_ERROR_RATE / 2**(i+1)``, so the whole chain stays under the configured rate
  however far it grows. Bits live in ``<spider>:dupefilter:bloom:<i>:<segment>`` (strings of
  4 MB, each filling one jemalloc size class; a filter has at most 2**42 bits), the layout and counts in the hash
  ``<spider>:dupefilter:bloom``. The ``k`` bit positions come from two 52-bit parts of the
  fingerprint by enhanced double hashing (Dillinger and Manolios, 2004). About 3.8 bytes per URL at 1e-6 when a filter is full. A Bloom filter cannot delete: forgotten fingerprints
  go to ``<spider>:dupefilter:forgotten`` and are let through once.

The hash ``<spider>:dupefilter:meta`` records who wrote the dupefilter: the fingerprinter class,
the fingerprint it gives a fixed probe request, and the layout. A worker whose fingerprinter or
layout differs refuses to start (:class:`DupefilterMismatch`), instead of silently crawling the
whole site again (rmax/scrapy-redis#272).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis as AsyncRedis
    from redis.client import Redis

    from scrapy_frontier.keys import Keys

MODES = ("exact", "bloom")
#: Bits per Redis string holding part of a Bloom filter: 4 MB less 64 bytes, so that a segment
#: and its header fill one jemalloc size class (a 37.7 MB string would take a 40 MB one).
SEGMENT_BITS = (4 * 1024 * 1024 - 64) * 8
#: The request whose fingerprint identifies a fingerprinter's algorithm in the meta hash.
PROBE = Request("http://fingerprint.probe/path?b=2&a=1#frag", method="POST", body=b"probe", headers={"X-Probe": "1"})

# A Lua function, shared by the push script of the frontier and the dedup script below.
# Locals it needs, declared by the caller's prologue (Redis forbids new globals): D (dupefilter key), FORGOTTEN (key),
# BLOOM (layout hash key), MODE ('set' | 'zset' | 'bloom'), NOW (ms), AGE (ms, zset only),
# CAP0 and ERR (bloom parameters for a new chain).
LUA_SEEN = """
local SEG = @SEGMENT_BITS@
local forgotten_any = redis.call('EXISTS', FORGOTTEN) == 1
local layout = nil
local function bloom_grow(t)
  local i = t.n
  local cap = t.cap0 * 2 ^ i
  local p = t.err / 2 ^ (i + 1)
  local k = math.ceil(-math.log(p) / math.log(2))
  local bits = math.ceil(-cap * math.log(p) / (math.log(2) ^ 2))
  if bits > 2 ^ 42 then
    bits = 2 ^ 42
    cap = math.floor(-bits * (math.log(2) ^ 2) / math.log(p))
  end
  t.f[i] = {cap = cap, k = k, bits = bits, count = 0, key = BLOOM .. ':' .. i .. ':'}
  t.n = i + 1
  redis.call('HSET', BLOOM, i .. ':cap', cap, i .. ':k', k, i .. ':bits', bits, i .. ':count', 0, 'n', t.n)
  -- Allocate the bits now, each segment exactly sized (SET of zeros): a string grown by SETBIT
  -- gets up to 1 MB more than it needs.
  for seg = 0, math.floor((bits - 1) / SEG) do
    redis.call('SET', t.f[i].key .. seg, string.rep('\0', math.ceil(math.min(SEG, bits - seg * SEG) / 8)))
  end
end
local function bloom_layout()
  if layout then return layout end
  local h = redis.call('HGETALL', BLOOM)
  local raw = {}
  for i = 1, #h, 2 do raw[h[i]] = tonumber(h[i + 1]) end
  local t = {f = {}, added = 0}
  if raw.n then
    t.cap0, t.err, t.n = raw.cap0, raw.err, raw.n
    for i = 0, t.n - 1 do
      t.f[i] = {cap = raw[i .. ':cap'], k = raw[i .. ':k'], bits = raw[i .. ':bits'], count = raw[i .. ':count'], key = BLOOM .. ':' .. i .. ':'}
    end
  else
    t.cap0, t.err, t.n = CAP0, ERR, 0
    redis.call('HSET', BLOOM, 'cap0', CAP0, 'err', ERR, 'n', 0, 'count', 0)
    bloom_grow(t)
  end
  layout = t
  return t
end
-- The k bit positions of a fingerprint in a filter, by enhanced double hashing (Dillinger and
-- Manolios, "Bloom Filters in Probabilistic Verification", 2004): plain double hashing lets
-- two fingerprints share all k positions far more often than 1/m^k in small filters. Every
-- value stays below the filter's size (< 2^42), so doubles keep it exact.
local function bloom_positions(filter, h1, h2)
  local bits, out = filter.bits, {}
  local a, b = math.fmod(h1, bits), math.fmod(h2, bits)
  for j = 0, filter.k - 1 do
    out[j + 1] = a
    a = math.fmod(a + b, bits)
    b = math.fmod(b + j, bits)
  end
  return out
end
-- Whether every one of the k bits is set in a filter: GETBIT until a 0 (a filter is at most
-- half ones, so an absent fingerprint costs about two calls).
local function bloom_has(filter, h1, h2)
  for _, pos in ipairs(bloom_positions(filter, h1, h2)) do
    local seg = math.floor(pos / SEG)
    if redis.call('GETBIT', filter.key .. seg, pos - seg * SEG) == 0 then return false end
  end
  return true
end
-- Sets the k bits in one BITFIELD call per segment; true when every bit was already 1.
local function bloom_set(filter, h1, h2)
  local by_seg = {}
  for _, pos in ipairs(bloom_positions(filter, h1, h2)) do
    local seg = math.floor(pos / SEG)
    local args = by_seg[seg]
    if not args then args = {}; by_seg[seg] = args end
    args[#args + 1] = 'SET'
    args[#args + 1] = 'u1'
    args[#args + 1] = pos - seg * SEG
    args[#args + 1] = 1
  end
  local all = true
  for seg, args in pairs(by_seg) do
    for _, bit in ipairs(redis.call('BITFIELD', filter.key .. seg, unpack(args))) do
      if bit == 0 then all = false end
    end
  end
  return all
end
-- Writes the Bloom counters kept in the layout table back to the hash (once per script).
local function bloom_flush()
  if not layout or layout.added == 0 then return end
  local last = layout.n - 1
  redis.call('HINCRBY', BLOOM, 'count', layout.added)
  redis.call('HSET', BLOOM, last .. ':count', layout.f[last].count)
end
-- Returns true when fp (hex) was not seen before, and records it.
local function seen_add(fp)
  if forgotten_any and redis.call('SREM', FORGOTTEN, fp) == 1 then
    if MODE == 'set' then redis.call('SADD', D, fp) elseif MODE == 'zset' then redis.call('ZADD', D, NOW, fp) end
    return true
  end
  if MODE == 'set' then return redis.call('SADD', D, fp) == 1 end
  if MODE == 'zset' then
    local at = redis.call('ZSCORE', D, fp)
    if at and tonumber(at) > NOW - AGE then return false end
    redis.call('ZADD', D, NOW, fp)
    return true
  end
  local t = bloom_layout()
  local h1 = tonumber(string.sub(fp, 1, 13), 16)
  local h2 = tonumber(string.sub(fp, 14, 26), 16)
  for i = 0, t.n - 2 do
    if bloom_has(t.f[i], h1, h2) then return false end
  end
  local last = t.f[t.n - 1]
  if last.count >= last.cap then
    -- Full: it becomes read-only, and the next filter is made when first needed.
    if bloom_has(last, h1, h2) then return false end
    redis.call('HSET', BLOOM, (t.n - 1) .. ':count', last.count)
    bloom_grow(t)
    last = t.f[t.n - 1]
  end
  if bloom_set(last, h1, h2) then return false end
  last.count = last.count + 1
  t.added = t.added + 1
  return true
end
""".replace("@SEGMENT_BITS@", str(SEGMENT_BITS))

_DEDUP = (
    """
-- KEYS: dupefilter, forgotten, bloom hash.  ARGV: mode, now ms, age ms, cap0, err, fingerprints...
local D, FORGOTTEN, BLOOM = KEYS[1], KEYS[2], KEYS[3]
local MODE, NOW, AGE, CAP0, ERR = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
"""
    + LUA_SEEN
    + """
local out = {}
for i = 6, #ARGV do out[#out + 1] = seen_add(ARGV[i]) and 1 or 0 end
bloom_flush()
return out
"""
)

_FORGET = """
-- KEYS: dupefilter, forgotten.  ARGV: mode, fingerprints...  Returns how many were known.
local n = 0
for i = 2, #ARGV do
  if ARGV[1] == 'set' then n = n + redis.call('SREM', KEYS[1], ARGV[i])
  elseif ARGV[1] == 'zset' then n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  else n = n + redis.call('SADD', KEYS[2], ARGV[i]) end
end
return n
"""


class DupefilterMismatch(Exception):
    """The dupefilter in Redis was written with another fingerprinter or layout."""


@dataclass(frozen=True)
class DedupConfig:
    """How this worker dedups: ``mode`` is ``exact`` or ``bloom``; ``recrawl_age`` in seconds
    (0: never; exact mode only); ``capacity`` (fingerprints) and ``error_rate`` (0-1) size the
    first Bloom filter."""

    mode: str = "exact"
    recrawl_age: float = 0.0
    capacity: int = 10_000_000
    error_rate: float = 1e-6

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"DUPEFILTER_MODE={self.mode!r}: must be one of {', '.join(MODES)}")
        if self.recrawl_age and self.mode == "bloom":
            raise ValueError("DUPEFILTER_RECRAWL_AGE needs DUPEFILTER_MODE=exact: a Bloom filter does not remember when it saw a URL")
        if not 0 <= self.recrawl_age < 10**12:  # also refuses inf and nan
            raise ValueError(f"DUPEFILTER_RECRAWL_AGE={self.recrawl_age!r}: must be a number of seconds >= 0")
        if not 1 <= self.capacity <= 2**40:
            raise ValueError(f"DUPEFILTER_BLOOM_CAPACITY={self.capacity!r}: must be between 1 and 2**40")
        if not 0 < self.error_rate < 1:
            raise ValueError(f"DUPEFILTER_BLOOM_ERROR_RATE={self.error_rate!r}: must be between 0 and 1")

    @property
    def layout(self) -> str:
        """``set``, ``zset`` or ``bloom``: the Redis layout of the dupefilter."""
        if self.mode == "bloom":
            return "bloom"
        return "zset" if self.recrawl_age else "set"

    def lua_args(self, now: int) -> list[Any]:
        """The arguments of :data:`LUA_SEEN`'s globals, in order: mode, now, age, cap0, err."""
        return [self.layout, now, int(self.recrawl_age * 1000), self.capacity, repr(self.error_rate)]

    @classmethod
    def from_settings(cls, settings: Any) -> DedupConfig:
        """Read ``DUPEFILTER_MODE``, ``DUPEFILTER_RECRAWL_AGE``, ``DUPEFILTER_BLOOM_CAPACITY``,
        ``DUPEFILTER_BLOOM_ERROR_RATE``. Raises ValueError naming the setting that is wrong."""
        values: dict[str, Any] = {}
        for attr, name, kind in (
            ("mode", "DUPEFILTER_MODE", str),
            ("recrawl_age", "DUPEFILTER_RECRAWL_AGE", float),
            ("capacity", "DUPEFILTER_BLOOM_CAPACITY", int),
            ("error_rate", "DUPEFILTER_BLOOM_ERROR_RATE", float),
        ):
            raw = settings.get(name)
            if raw is None or raw == "":
                continue
            try:
                values[attr] = kind(float(raw)) if kind is int else kind(raw)
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{name}={raw!r} is not a valid {kind.__name__}") from None
        if "mode" in values:
            values["mode"] = values["mode"].strip().lower()
        return cls(**values)


def bloom_size(capacity: int, error_rate: float) -> tuple[int, int]:
    """``(bits, hashes)`` of a Bloom filter holding ``capacity`` items at ``error_rate``
    (m = -n ln p / (ln 2)^2, k = ceil(log2(1/p))), as the Lua script computes them."""
    k = math.ceil(-math.log(error_rate) / math.log(2))
    return math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2), k


def fingerprinter_id(fingerprinter: Any) -> tuple[str, str]:
    """``(class path, hex fingerprint of PROBE)``: what the meta hash records."""
    cls = type(fingerprinter)
    return f"{cls.__module__}.{cls.__qualname__}", fingerprinter.fingerprint(PROBE).hex()


def meta_for(config: DedupConfig, fingerprinter: Any) -> dict[str, str]:
    name, probe = fingerprinter_id(fingerprinter)
    return {"fingerprinter": name, "probe": probe, "layout": config.layout}


def check_meta(stored: dict[str, str], wanted: dict[str, str], key: str) -> None:
    """Raise :class:`DupefilterMismatch` with what differs and what to do about it."""
    if stored.get("probe", wanted["probe"]) != wanted["probe"]:
        raise DupefilterMismatch(
            f"The dupefilter {key} was written by fingerprinter {stored.get('fingerprinter')} "
            f"(probe fingerprint {stored['probe'][:12]}...), but this worker's {wanted['fingerprinter']} gives "
            f"{wanted['probe'][:12]}...: every URL would look new and the whole crawl would be fetched again. "
            "Use the same REQUEST_FINGERPRINTER_CLASS (and Scrapy version) as the workers that wrote it, "
            "or start over with another SCHEDULER_DUPEFILTER_KEY."
        )
    if stored.get("layout", wanted["layout"]) != wanted["layout"]:
        raise DupefilterMismatch(
            f"The dupefilter {key} is in layout {stored['layout']!r}, but this worker is set for {wanted['layout']!r} "
            "(DUPEFILTER_MODE / DUPEFILTER_RECRAWL_AGE): use the settings the crawl started with, "
            "or start over with another SCHEDULER_DUPEFILTER_KEY."
        )


_LAYOUT_OF_TYPE = {b"set": "set", b"zset": "zset"}


async def claim(redis: AsyncRedis, keys: Keys, config: DedupConfig, fingerprinter: Any) -> bool:
    """Record this worker's fingerprinter and layout in ``<spider>:dupefilter:meta`` if nobody
    has (returns True), else check them against what is there. A dupefilter written before the
    meta existed (by scrapy-redis, say) is adopted if its Redis type matches the layout.
    Raises :class:`DupefilterMismatch`."""
    wanted = meta_for(config, fingerprinter)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.dupefilter_meta)
        pipe.type(keys.dupefilter)
        pipe.exists(keys.bloom)
        stored_raw, kind, bloom = await pipe.execute()
    stored = {k.decode(): v.decode() for k, v in stored_raw.items()}
    if not stored:
        if kind in _LAYOUT_OF_TYPE:
            stored = {"layout": _LAYOUT_OF_TYPE[kind]}
        elif bloom:
            stored = {"layout": "bloom"}
    check_meta(stored, wanted, keys.dupefilter)
    if "probe" in stored:
        return False
    # HSETNX on the probe: two workers starting together cannot both write different metas.
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hsetnx(keys.dupefilter_meta, "probe", wanted["probe"])
        pipe.hsetnx(keys.dupefilter_meta, "fingerprinter", wanted["fingerprinter"])
        pipe.hsetnx(keys.dupefilter_meta, "layout", wanted["layout"])
        pipe.hgetall(keys.dupefilter_meta)
        *_, now_raw = await pipe.execute()
    check_meta({k.decode(): v.decode() for k, v in now_raw.items()}, wanted, keys.dupefilter)
    return True


class Dupefilter:
    """Check-and-add and forget on the shared dupefilter, outside the frontier's push (for the
    ``forget`` command, benchmarks and tests). Works with a sync or an asyncio client: methods
    return what the client's script call returns (await it with an asyncio client)."""

    def __init__(self, redis: Redis | AsyncRedis, keys: Keys, config: DedupConfig) -> None:
        self.keys = keys
        self.config = config
        self._dedup = redis.register_script(_DEDUP)
        self._forget = redis.register_script(_FORGET)

    def add(self, fingerprints: Sequence[str], now: int) -> Any:
        """Check and record hex ``fingerprints``: a list of 1 (new) / 0 (seen), in order."""
        k = self.keys
        return self._dedup(keys=[k.dupefilter, k.forgotten, k.bloom], args=[*self.config.lua_args(now), *fingerprints])

    def forget(self, fingerprints: Sequence[str]) -> Any:
        """Let these fingerprints through the dupefilter once more. Returns how many the exact
        layouts knew (a Bloom filter cannot tell: every one counts)."""
        return self._forget(keys=[self.keys.dupefilter, self.keys.forgotten], args=[self.config.layout, *fingerprints])


def stored_layout(sync: Redis, keys: Keys) -> str | None:
    """The layout recorded for a crawl's dupefilter, or guessed from the key types; None if empty."""
    layout = sync.hget(keys.dupefilter_meta, "layout")
    if layout:
        return layout.decode()
    kind = sync.type(keys.dupefilter)
    if kind in _LAYOUT_OF_TYPE:
        return _LAYOUT_OF_TYPE[kind]
    return "bloom" if sync.exists(keys.bloom) else None
