"""Politeness shared by every worker of a crawl: per-host rates, slow-downs and pauses in Redis.

Two checks use the same per-host state (``<spider>:politeness:<host>``, every field described
in :attr:`scrapy_frontier.keys.Keys.politeness_prefix`) and the same rate rule, one Lua file
(``scrapy_frontier/lua/lib/politeness_policy.lua``) included by both:

- when requests are taken from the frontier (the lease script, ``lua/frontier_lease.lua``, due
  time ``next``): a host that is not due gives nothing and
  is put back in the index at the time it is due, so it never holds back other hosts;
- just before a request is sent (:meth:`Politeness.reserve`, one Lua call): the request gets the
  host's next send time, ``max(now, next_send, pause_until)``, and moves ``next_send`` on by
  ``1 / rate`` seconds. Sends to a host are so spaced by at least ``1 / rate`` across the
  cluster (a generic cell rate algorithm with a burst of one).

A host's rate, in requests/second: its entry in ``<spider>:rates`` (live, ``HSET``), else
``DOMAIN_RATE_LIMIT``; its robots.txt ``Crawl-delay`` wins when stricter; multiplied by its
``factor``, which a 429 or 503 halves (down to ``POLITENESS_MIN_FACTOR``) and each later success
raises by ``POLITENESS_RECOVERY_STEP`` back to 1 (a host with no rate that is slowed down
starts from ``POLITENESS_BASE_RATE``). A ``Retry-After`` (RFC 9110, section 10.2.3)
pauses the host for every worker until the time given; so does a robots.txt that cannot be
fetched (RFC 9309, section 2.3.1.4), until it is tried again (:meth:`Politeness.pause`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from scrapy_frontier.scripts import source

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio import Redis

    from scrapy_frontier.keys import Keys


class Politeness:
    """One crawl's shared politeness state, seen from one worker (needs only a redis.asyncio client)."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        default_rate: float = 0.0,
        min_factor: float = 0.05,
        recovery_step: float = 0.1,
        base_rate: float = 10.0,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.default_rate = default_rate
        self.min_factor = min_factor
        self.recovery_step = recovery_step
        self.base_rate = base_rate
        self._reserve = redis.register_script(source("politeness_reserve"))
        self._slow_down = redis.register_script(source("politeness_slow_down"))
        self._recover = redis.register_script(source("politeness_recover"))
        self._pause = redis.register_script(source("politeness_pause"))

    def _state(self, host: str) -> str:
        return self.keys.shard_of(host).politeness_prefix + host

    async def reserve(self, host: str) -> float:
        """Book the next send to ``host``; returns the seconds to wait before sending."""
        wait_ms = await self._reserve(
            keys=[self._state(host), self.keys.shard_of(host).rates], args=[host, self.default_rate]
        )
        return int(wait_ms) / 1000

    async def slow_down(self, host: str, pause: float | None = None) -> float:
        """Halve ``host``'s rate for every worker (a host without a rate gets ``base_rate``
        first) and, with ``pause`` seconds, send it nothing until then. Returns the new factor."""
        sh = self.keys.shard_of(host)
        factor = await self._slow_down(
            keys=[self._state(host), sh.rates, sh.limited],
            args=[
                host,
                self.default_rate,
                self.min_factor,
                int((pause or 0) * 1000),
                self.base_rate,
                self.keys.politeness_events,
            ],
        )
        return float(factor)

    async def pause(self, host: str, seconds: float) -> None:
        """Send ``host`` nothing, from any worker, for ``seconds`` (the frontier gives none of its
        requests; a later pause already recorded stays), its rate untouched."""
        sh = self.keys.shard_of(host)
        await self._pause(
            keys=[self._state(host), sh.limited], args=[host, int(seconds * 1000), self.keys.politeness_events]
        )

    async def recover(self, host: str) -> float:
        """Raise ``host``'s factor by ``recovery_step`` (up to 1). Returns the new factor."""
        return float(
            await self._recover(
                keys=[self._state(host), self.keys.shard_of(host).limited], args=[self.recovery_step, host]
            )
        )

    async def set_robots_delay(self, host: str, delay: float) -> None:
        """Record ``host``'s robots.txt Crawl-delay (seconds) for every worker, and book a send
        for the robots.txt request itself, which preceded the first page."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(self._state(host), "robots_delay", delay)
            pipe.sadd(self.keys.shard_of(host).limited, host)
            pipe.publish(self.keys.politeness_events, host)
            await pipe.execute()
        await self.reserve(host)

    async def active_hosts(self) -> set[str]:
        """Hosts that need :meth:`reserve` even when ``DOMAIN_RATE_LIMIT`` is 0: those with a live
        rate in ``<spider>:rates`` and those in ``<spider>:politeness:@limited`` (every shard's)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hkeys(self.keys.rates)
            for sh in self.keys.all_shards():
                pipe.smembers(sh.limited)
            rated, *slowed = await pipe.execute()
        return {h.decode() for h in rated} | {h.decode() for members in slowed for h in members}

    async def watch(self, on_host: Callable[[str], None]) -> None:
        """Call ``on_host(host)`` for every host another worker slows down, pauses or finds a
        Crawl-delay for, as it happens (Redis pub/sub). Runs until cancelled; reconnects."""
        while True:
            pubsub = self.redis.pubsub()
            try:
                await pubsub.subscribe(self.keys.politeness_events)
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        on_host(message["data"].decode())
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(1.0)
            finally:
                await pubsub.aclose()

    async def seed_rates(self, rates: dict[str, float]) -> None:
        """Put the ``DOMAIN_RATE_LIMITS`` setting in ``<spider>:rates`` without overwriting live edits."""
        if rates:
            async with self.redis.pipeline(transaction=False) as pipe:
                for host, rate in rates.items():
                    pipe.hsetnx(self.keys.rates, host, rate)
                await pipe.execute()
            await sync_rates(self.redis, self.keys)


async def sync_rates(redis: Redis, keys: Keys, last: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    """Copy the live rates ``<spider>:rates`` into every shard's copy (a sharded crawl's scripts
    read their shard's slot only), when they differ from ``last`` (what the previous call
    copied). Returns what ``<spider>:rates`` holds now. Every worker may do this: the copies are
    replaced whole, the same value by each."""
    if not keys.shards:
        return {}
    rates = cast("dict[bytes, bytes]", await redis.hgetall(keys.rates))  # a client of bytes
    if rates != last:
        for sh in keys.all_shards():
            async with redis.pipeline(transaction=True) as pipe:
                pipe.delete(sh.rates)
                if rates:
                    # redis-py's mapping type is invariant in its key: only a dict of its whole union fits
                    pipe.hset(sh.rates, mapping=rates)  # type: ignore[arg-type]
                await pipe.execute()
    return rates
