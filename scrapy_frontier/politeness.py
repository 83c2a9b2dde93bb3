"""Politeness shared by every worker of a crawl: per-host rates, slow-downs and pauses in Redis.

Two checks use the same per-host state (``<spider>:politeness:<host>``, every field described
in :attr:`scrapy_frontier.keys.Keys.politeness_prefix`) and the same rate rule, one Lua file
(``scrapy_frontier/lua/lib/politeness_policy.lua``) included by both:

- when requests are taken from the frontier (the lease script, ``lua/frontier_lease.lua``): a
  host that is not due (``next``, ``pause_until``) gives nothing and is put back in the index at
  the time it is due, so it never holds back other hosts; a host that is due gives at most the
  requests it may send in the next second, and their send times are booked there, one every
  ``1 / rate`` seconds from now (``next`` moves past the last);
- just before a request is sent (the politeness middleware): it waits for its booked time. One
  that could not leave on time (more than :func:`send_tolerance` late), or whose host another
  worker slowed down or paused since, books a new send time (:meth:`Politeness.reserve`, one Lua
  call: ``max(now, next, pause_until)``, and ``next`` moves on by ``1 / rate``). Sends to a host
  are so spaced by ``1 / rate`` across the cluster (a generic cell rate algorithm with a burst of
  one), each at most the tolerance after its booked time.

A host's rate, in requests/second: its entry in ``<spider>:rates`` (live, ``HSET``), else
``DOMAIN_RATE_LIMIT``; its robots.txt ``Crawl-delay`` wins when stricter; multiplied by its
``factor``, which a 429 or 503 halves (down to ``POLITENESS_MIN_FACTOR``) and each later success
raises by ``POLITENESS_RECOVERY_STEP`` back to 1 (a host with no rate that is slowed down
starts from ``POLITENESS_BASE_RATE``). A ``Retry-After`` (RFC 9110, section 10.2.3)
pauses the host for every worker until the time given; so does a robots.txt that cannot be
fetched (RFC 9309, section 2.3.1.4), until it is tried again (:meth:`Politeness.pause`).

With ``AUTOTHROTTLE_ENABLED``, AutoThrottle runs for the whole crawl (:class:`SharedAutoThrottle`):
each host's delay (its entry in ``@at_delay``) follows Scrapy's rule on every worker's responses, and
``1 / delay`` is one more rate, the strictest rate winning.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from scrapy_frontier.config import read_setting
from scrapy_frontier.scripts import source

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio import Redis
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from scrapy_frontier.keys import Keys


#: Request meta key: the send booked for a request when it was leased, ``(when, interval, strict,
#: leased)``: the ``time.monotonic()`` it may leave at, the seconds between its host's sends,
#: whether a rate rule other than AutoThrottle set them (:class:`scrapy_frontier.frontier.Lease`),
#: and the ``time.monotonic()`` of the lease.
SEND_AT_META = "_frontier_send_at"


def domain_rate(crawler: Crawler) -> float:
    """``DOMAIN_RATE_LIMIT`` (requests/second per host for the whole crawl, 0 or unset: none; the
    add-on sets it from a ``DOWNLOAD_DELAY``, :func:`scrapy_frontier.addon.delay_for_the_crawl`)."""
    return float(read_setting(crawler, "DOMAIN_RATE_LIMIT") or 0.0)


def domain_concurrency(crawler: Crawler) -> int:
    """``DOMAIN_CONCURRENCY`` (requests in flight per host across the cluster, 0: no cap), unset:
    Scrapy's ``CONCURRENT_REQUESTS_PER_DOMAIN``, what one worker would send a host at once."""
    return concurrency_cap(read_setting(crawler, "DOMAIN_CONCURRENCY"), crawler.settings)


def concurrency_cap(value: int | None, settings: BaseSettings) -> int:
    """``DOMAIN_CONCURRENCY``'s ``value`` as the crawl applies it: unset (None), ``settings``'
    ``CONCURRENT_REQUESTS_PER_DOMAIN``."""
    return int(value) if value is not None else settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")


def latency_seconds(sample: float) -> float:
    """A host's last latency as ``<prefix>@latency`` keeps it (the sample a worker sent, in µs; a
    response that is not a 200's as ``-1 - latency``), in seconds."""
    return (sample if sample >= 0 else -1 - sample) / 1e6


def live_rate(value: bytes | str | None) -> float | None:
    """A live rate of ``<spider>:rates`` (requests/second) as the scripts take it
    (``politeness_policy.lua``'s ``rate_num``): a finite number >= 0, else None (absent, or not a
    number, negative, NaN or infinite: the host then has the default rate)."""
    try:
        rate = float(value) if value is not None else None
    except ValueError:
        return None
    return rate if rate is not None and 0 <= rate < float("inf") else None


#: The busy hosts ``scrapy status`` and the metrics show: those with the most requests in flight.
BUSY_HOSTS = 10
#: Hosts with a politeness rule looked at per shard for a pause, when nothing of theirs is in flight.
PAUSED_SAMPLE = 100
#: The fields of a host's politeness hash that :func:`busy_host` reads, in order.
POLITENESS_FIELDS = ("factor", "pause_until", "robots_delay", "base_rate")
#: The replies :func:`read_busy_hosts` queues per host.
_BUSY_REPLIES = 4


def busiest(
    inflight: list[dict[bytes, bytes]], limit: int = BUSY_HOSTS, limited: list[list[bytes]] | None = None
) -> dict[str, int]:
    """The ``limit`` hosts with the most requests in flight across the crawl, most first, from
    every shard's in-flight hash (``HGETALL`` of :attr:`Shard.inflight
    <scrapy_frontier.keys.Shard.inflight>`): host -> count; then, with 0, the hosts of
    ``limited`` (each shard's ``SRANDMEMBER`` of :attr:`Shard.limited
    <scrapy_frontier.keys.Shard.limited>`, :data:`PAUSED_SAMPLE`) that are not among them, of
    which :func:`busy_hosts` keeps the paused ones."""
    counts: dict[str, int] = {}
    for held in inflight:
        for host, count in held.items():
            if count.isdigit() and int(count) > 0:
                counts[host.decode()] = int(count)
    top = {host: counts[host] for host in sorted(counts, key=lambda h: (-counts[h], h))[:limit]}
    for members in limited or ():
        for member in sorted(members):
            top.setdefault(member.decode(), 0)
    return top


def read_limited_sample(pipe: Any, keys: Keys) -> None:
    """Queue on ``pipe`` each shard's sample of hosts with a politeness rule (one reply a shard),
    for :func:`busiest`'s ``limited``: a host paused with nothing in flight (its robots.txt
    unreachable, a ``Retry-After``) is a busy host too, the one that holds the crawl back."""
    for sh in keys.all_shards():
        pipe.srandmember(sh.limited, PAUSED_SAMPLE)


def read_busy_hosts(pipe: Any, keys: Keys, counts: dict[str, int]) -> None:
    """Queue on ``pipe`` (a redis-py pipeline, sync or asyncio) the reads :func:`busy_hosts`
    needs: each host's :data:`POLITENESS_FIELDS`, AutoThrottle delay, latency and live rate, four
    replies a host."""
    for host in counts:
        sh = keys.shard_of(host)
        pipe.hmget(sh.politeness_prefix + host, POLITENESS_FIELDS)
        pipe.hget(sh.at_delay, host)
        pipe.hget(sh.latency, host)
        pipe.hget(keys.rates, host)


def busy_hosts(
    counts: dict[str, int], replies: list[Any], default_rate: float, cap: int, now: float
) -> list[dict[str, Any]]:
    """The busy hosts (:func:`busiest`'s ``counts``), each as :func:`busy_host` gives it, from the
    ``replies`` to :func:`read_busy_hosts`: those with requests in flight, and those paused."""
    hosts = []
    for i, (host, count) in enumerate(counts.items()):
        fields, at_delay, latency, rate = replies[_BUSY_REPLIES * i : _BUSY_REPLIES * (i + 1)]
        hosts.append(busy_host(host, count, [*fields, at_delay, latency], rate, default_rate, cap, now))
    return [h for h in hosts if h["in_flight"] or "paused" in h["held_back_by"]]


def busy_host(
    host: str,
    in_flight: int,
    fields: list[bytes | None],
    rate: bytes | None,
    default_rate: float,
    cap: int,
    now: float,
) -> dict[str, Any]:
    """One busy host as ``scrapy status`` and the metrics show it: ``host``, ``in_flight``,
    ``delay_s`` (between two sends, 0: none), ``latency_s`` (its last response's, as AutoThrottle
    saw it; None: not known) and ``held_back_by`` (:func:`held_back`). ``fields``: its politeness
    hash's :data:`POLITENESS_FIELDS` (``HMGET``) then its AutoThrottle delay and latency (µs, as
    the shard's hashes keep them), ``rate`` its entry in ``<spider>:rates``, ``now`` the server's
    Unix time. A live rate that is not a finite number >= 0 is ignored, as the scripts ignore it
    (``held_back_by`` then ends with ``bad live rate ignored``)."""
    names = (*POLITENESS_FIELDS, "at_delay", "latency")
    state = {name: float(v) for name, v in zip(names, fields) if v is not None}
    live = live_rate(rate)
    wait, reasons = held_back(state, live, default_rate, in_flight, cap, now)
    if rate is not None and live is None:
        reasons.append("bad live rate ignored")
    return {
        "host": host,
        "in_flight": in_flight,
        "delay_s": round(wait, 3),
        "latency_s": round(latency_seconds(state["latency"]), 3) if "latency" in state else None,
        "held_back_by": reasons,
    }


def held_back(
    state: dict[str, float], live_rate: float | None, default_rate: float, in_flight: int, cap: int, now: float
) -> tuple[float, list[str]]:
    """What holds a host back, read as ``lua/lib/politeness_policy.lua`` decides: its delay between
    sends (seconds, 0: none) and why: ``paused`` (a ``Retry-After``, or its robots.txt unreachable)
    first when it is, then the rate rule that sets the delay (the strictest of ``rate``, its
    ``DOMAIN_RATE_LIMIT`` or own rate, ``Crawl-delay`` and ``AutoThrottle``), ``slowed down`` (a
    429/503), ``concurrency cap`` (its requests in flight are at the cap). ``state``: the host's
    politeness hash as numbers (missing fields absent), ``now`` Unix seconds (the server's)."""
    factor = state.get("factor", 1.0)
    rates: dict[str, float] = {}
    rate = live_rate if live_rate is not None else default_rate
    if rate > 0:
        rates["rate"] = rate * factor
    robots = state.get("robots_delay", 0.0)
    if robots > 0:
        rates["Crawl-delay"] = factor / robots
    if not rates and factor < 1 and state.get("base_rate"):
        rates["slowed down"] = state["base_rate"] * factor
    at_delay = state.get("at_delay", 0.0) / 1e6
    if at_delay > 0:
        rates["AutoThrottle"] = 1 / at_delay
    reasons = [min(rates, key=rates.__getitem__)] if rates else []
    if factor < 1 and "slowed down" not in reasons:
        reasons.append("slowed down")
    if state.get("pause_until", 0.0) / 1000 > now:
        reasons.insert(0, "paused")
    if cap and in_flight >= cap:
        reasons.append("concurrency cap")
    return (1 / min(rates.values()) if rates else 0.0), reasons


def send_tolerance(interval: float) -> float:
    """How late (seconds) a request may leave after the send time booked for it, its host's sends
    being ``interval`` seconds apart: half the interval, at least 10 ms. So at most ``rate + 1``
    requests leave in any second (``rate`` requests/second), and at most ``1.01 x rate + 1`` above
    100 requests/second."""
    return max(interval / 2, 0.01)


def moves_pace(want: float, pace: tuple[float, bool] | None) -> bool:
    """Whether a response whose latency / ``AUTOTHROTTLE_TARGET_CONCURRENCY`` is ``want``
    (seconds) would move its host's pace materially: ``pace`` is the host's time between sends
    and whether a rule other than AutoThrottle sets it (a rate: then only a ``want`` above it
    matters), from its last lease; ``None``: not known. Scrapy's rule takes the delay to ``want``
    when larger, else halfway to it; a quarter's difference and a millisecond is "material"."""
    if pace is None:
        return True
    interval, strict = pace
    return want > 1.25 * interval + 0.001 or (not strict and want < 0.75 * interval - 0.001)


class LatencySamples:
    """Download latencies buffered per host for the shared AutoThrottle, sent once a host's are
    worth a write of its delay in Redis: ``batch`` of them, the oldest ``hold`` seconds old, one
    of a response that was not a ``200`` (which may raise the delay), or one ``urgent``
    (:func:`moves_pace`: a new host's delay, from ``AUTOTHROTTLE_START_DELAY``, follows its
    latency as fast as Scrapy's AutoThrottle would, and a host that slows down is slowed at
    once). Each write applies the samples in order, as Scrapy's AutoThrottle applies each
    response's, so a delay is the same, written up to ``hold`` seconds later; fewer writes make
    AutoThrottle cost Redis less (bench/README.md). A sample is a latency in µs, ``-1 -
    latency`` for an error response; a host keeps its ``most`` newest."""

    def __init__(self, batch: int = 4, hold: float = 1.0, most: int = 100) -> None:
        self.batch, self.hold, self.most = batch, hold, most
        self._held: dict[str, list[int]] = {}
        self._since: dict[str, float] = {}
        self._urgent: set[str] = set()
        #: Whether a sample held moves its host's pace or is of an error response: to send at once.
        self.pressing = False

    def add(self, host: str, sample: int, now: float, urgent: bool = False) -> None:
        samples = self._held.setdefault(host, [])
        if not samples:
            self._since[host] = now
        samples.append(sample)
        if len(samples) > self.most:
            del samples[0]
        if urgent or sample < 0 or len(samples) >= self.batch:
            self._urgent.add(host)
        if urgent or sample < 0:
            self.pressing = True

    def take(self, now: float, everything: bool = False) -> dict[str, list[int]] | None:
        """The samples to send now (taken out of the buffer), ``None`` when none is due;
        ``everything``: all of them (the last flush)."""
        if not self._held or not (everything or self._urgent or min(self._since.values()) <= now - self.hold):
            return None
        out: dict[str, list[int]] = {}
        self.pressing = False
        for host, samples in list(self._held.items()):
            if everything or host in self._urgent or self._since[host] <= now - self.hold:
                out[host] = samples
                del self._held[host], self._since[host]
                self._urgent.discard(host)
        return out or None

    def __len__(self) -> int:
        return len(self._held)


@dataclass(frozen=True)
class SharedAutoThrottle:
    """Scrapy's AutoThrottle (https://docs.scrapy.org/en/latest/topics/autothrottle.html) for all
    the workers of a crawl together, from the same settings with the same meanings:
    ``target_concurrency`` (``AUTOTHROTTLE_TARGET_CONCURRENCY``, requests in flight to a host
    across the crawl, on average), ``start_delay`` (``AUTOTHROTTLE_START_DELAY``, seconds, at
    least ``DOWNLOAD_DELAY``), ``min_delay`` (``DOWNLOAD_DELAY``), ``max_delay``
    (``AUTOTHROTTLE_MAX_DELAY``), ``debug`` (``AUTOTHROTTLE_DEBUG``). A host's delay lives in its
    shard's ``@at_delay`` hash (µs, :attr:`Shard.at_delay <scrapy_frontier.keys.Shard.at_delay>`);
    each response's ``download_latency`` moves it as Scrapy's ``AutoThrottle._adjust_delay`` does
    (``lua/frontier_push.lua``), and its sends, from every worker, are spaced by it."""

    target_concurrency: float
    start_delay: float
    min_delay: float
    max_delay: float
    debug: bool = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedAutoThrottle | None:
        """The crawl's shared AutoThrottle, or ``None`` when ``AUTOTHROTTLE_ENABLED`` or
        ``POLITENESS_ENABLED`` is off (the add-on checked the numbers at start)."""
        settings = crawler.settings
        if not settings.getbool("AUTOTHROTTLE_ENABLED") or not read_setting(crawler, "POLITENESS_ENABLED"):
            return None
        min_delay = settings.getfloat("DOWNLOAD_DELAY")
        return cls(
            target_concurrency=settings.getfloat("AUTOTHROTTLE_TARGET_CONCURRENCY"),
            start_delay=max(min_delay, settings.getfloat("AUTOTHROTTLE_START_DELAY")),
            min_delay=min_delay,
            max_delay=settings.getfloat("AUTOTHROTTLE_MAX_DELAY"),
            debug=settings.getbool("AUTOTHROTTLE_DEBUG"),
        )

    def lua_args(self) -> list[str]:
        """The delay rule's numbers, as ``lua/frontier_push.lua`` reads them before its samples:
        the target concurrency, then the minimum, maximum and start delays in µs."""
        return [repr(self.target_concurrency), *(micros(d) for d in (self.min_delay, self.max_delay, self.start_delay))]


def micros(seconds: float) -> str:
    """``seconds`` as a whole number of µs, the unit the scripts keep delays in (a Lua script reads
    an integer's text several times faster than a fraction's, and writes it faster)."""
    return str(round(seconds * 1e6))


def autothrottle_start(autothrottle: SharedAutoThrottle | None) -> str:
    """The start-delay argument of the lease and reserve scripts (µs): ``''`` when AutoThrottle is off."""
    return "" if autothrottle is None else micros(autothrottle.start_delay)


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
        autothrottle: SharedAutoThrottle | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.default_rate = default_rate
        self.min_factor = min_factor
        self.recovery_step = recovery_step
        self.base_rate = base_rate
        self.autothrottle = autothrottle
        self._reserve = redis.register_script(source("politeness_reserve"))
        self._bookings: list[tuple[str, asyncio.Future[float]]] = []
        self._booking_tasks: set[asyncio.Task[None]] = set()
        self._slow_down = redis.register_script(source("politeness_slow_down"))
        self._recover = redis.register_script(source("politeness_recover"))
        self._pause = redis.register_script(source("politeness_pause"))

    def _state(self, host: str) -> str:
        return self.keys.shard_of(host).politeness_prefix + host

    async def reserve(self, host: str) -> float:
        """Book the next send to ``host``; returns the seconds to wait before sending. The
        bookings asked for in one turn of the event loop go to Redis together, one call per
        frontier shard (``politeness_reserve``). Raises what the call raised (a Redis error)."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._bookings.append((host, future))
        if len(self._bookings) == 1:
            asyncio.get_running_loop().call_soon(self._book)
        return await future

    def _book(self) -> None:
        bookings, self._bookings = self._bookings, []
        shards: dict[str, Any] = {}
        by_shard: dict[str, list[tuple[str, asyncio.Future[float]]]] = defaultdict(list)
        for host, future in bookings:
            shard = self.keys.shard_of(host)
            shards[shard.politeness_prefix] = shard
            by_shard[shard.politeness_prefix].append((host, future))
        for prefix, group in by_shard.items():
            task = asyncio.ensure_future(self._book_shard(shards[prefix], group))
            self._booking_tasks.add(task)
            task.add_done_callback(self._booking_tasks.discard)

    async def _book_shard(self, shard: Any, group: list[tuple[str, asyncio.Future[float]]]) -> None:
        try:
            waits = await self._reserve(
                keys=[shard.rates],
                args=[
                    shard.politeness_prefix,
                    self.default_rate,
                    autothrottle_start(self.autothrottle),
                    *(host for host, _ in group),
                ],
            )
        except BaseException as exc:  # a cancelled call too: no request may wait for its booking forever
            for _, future in group:
                if not future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), wait_ms in zip(group, waits):
            if not future.done():
                future.set_result(int(wait_ms) / 1000)

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

    async def active_hosts(self) -> tuple[set[str], dict[str, bytes]]:
        """Hosts that need :meth:`reserve` even when ``DOMAIN_RATE_LIMIT`` is 0: those with a live
        rate in ``<spider>:rates`` and those in ``<spider>:politeness:@limited`` (every shard's);
        and the live rates that are not a finite number >= 0 (host -> the value), which the scripts ignore."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.rates)
            for sh in self.keys.all_shards():
                pipe.smembers(sh.limited)
            rated, *slowed = await pipe.execute()
        bad = {h.decode(): v for h, v in rated.items() if live_rate(v) is None}
        return {h.decode() for h in rated} | {h.decode() for members in slowed for h in members}, bad

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
