"""Adopting a scrapy-redis crawl in progress: its queued requests moved into the frontier, its
dupefilter kept and read with the fingerprint that wrote it.

scrapy-redis 0.9.1 (``scrapy_redis.scheduler.Scheduler``) keeps a crawl in two keys:

- ``<spider>:requests`` (``SCHEDULER_QUEUE_KEY``): requests serialized by
  ``SCHEDULER_SERIALIZER`` (pickle by default) of ``Request.to_dict()``; a sorted set scored by
  ``-priority`` (``PriorityQueue``, the default) or a list (``FifoQueue``: ``LPUSH`` + ``RPOP``;
  ``LifoQueue``: ``LPUSH`` + ``LPOP``);
- ``<spider>:dupefilter`` (``SCHEDULER_DUPEFILTER_KEY``): a set of hex fingerprints, computed by
  ``RFPDupeFilter.request_fingerprint``: SHA-1 of the JSON of the method, the canonical URL and
  the body, which is not Scrapy's ``RequestFingerprinter`` (that one adds the headers).

A crawl is scrapy-redis's when those keys exist and ``<spider>:dupefilter:meta`` does not (the
frontier writes it when a crawl starts). The first worker to join it:

1. takes the adoption lock ``<spider>:scrapy-redis:adopting`` (other workers wait for it),
   checks that no scrapy-redis worker still writes the crawl (:data:`QUIET`), and renames the
   queue to ``<spider>:scrapy-redis:requests``, freeing ``<spider>:requests`` for the frontier's
   index of hosts;
2. finds which fingerprint wrote the dupefilter: the fingerprints of the queued requests (each
   was added to the dupefilter when it was queued) and of the spider's ``start_urls`` are looked
   up under scrapy-redis's and under Scrapy's; scrapy-redis's unless Scrapy's matches more. The
   crawl records it in its meta (``fingerprinter``), and every worker then checks new requests
   with it (:func:`crawl_fingerprinter`), so nothing already fetched is fetched again;
3. moves the requests, in the order scrapy-redis would have popped them (a LIFO crawl's frontier
   serves each host's newest first, as its ``LifoQueue`` did), into the frontier in
   batches: each batch is queued first, then deleted from the renamed key. An adopted request
   is queued under a fingerprint of its serialized bytes (SHA-1 of ``adopted:`` + bytes), so a batch
   moved again after a crash is not queued twice. A request that cannot be decoded or turned
   into a frontier request is kept, bytes and all (base64), in the dead-letter list
   ``<spider>:scrapy-redis:invalid``.

Nothing is deleted before it is in the frontier or in the dead-letter list.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.request import request_from_dict

from scrapy_frontier.connection import is_cluster, text
from scrapy_frontier.frontier import Entry
from scrapy_frontier.keys import queue_host
from scrapy_frontier.serialize import RequestRefused, request_to_json
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from scrapy import Spider
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.frontier import Frontier
    from scrapy_frontier.keys import Keys

logger = logging.getLogger(__name__)

#: What ``<spider>:dupefilter:meta`` records as the fingerprinter of a scrapy-redis dupefilter.
SCRAPY_REDIS_FINGERPRINTER = "scrapy_redis.dupefilter.RFPDupeFilter"
#: Requests moved per batch (one push call each).
BATCH = 500
#: Seconds the adoption lock lives without being renewed (each batch renews it).
LOCK_TTL = 60
#: Queued requests decoded to find which fingerprint wrote the dupefilter.
PROBE_SAMPLE = 50
#: Seconds a scrapy-redis crawl must stay unchanged before it is adopted: a scrapy-redis worker
#: still running pops and pushes within them.
QUIET = 2.0


class AdoptionError(Exception):
    """A scrapy-redis crawl that cannot be adopted; the message says what to do."""


class ScrapyRedisFingerprinter:
    """scrapy-redis's request fingerprint, from the installed ``scrapy_redis.dupefilter.RFPDupeFilter``,
    behind Scrapy's fingerprinter interface: ``fingerprint(request) -> bytes`` (20 bytes, SHA-1).
    Raises :class:`AdoptionError` when scrapy-redis is not installed."""

    recorded_name = SCRAPY_REDIS_FINGERPRINTER

    def __init__(self) -> None:
        try:
            from scrapy_redis.dupefilter import RFPDupeFilter  # type: ignore[import-untyped]
        except ImportError as exc:
            raise AdoptionError(
                f"the crawl's dupefilter was written by scrapy-redis, whose fingerprint this worker needs: "
                f"pip install scrapy-redis ({exc})"
            ) from None
        # request_fingerprint uses no connection: the filter is built without one.
        self._filter = RFPDupeFilter(server=None, key="")

    def fingerprint(self, request: Request) -> bytes:
        return bytes.fromhex(self._filter.request_fingerprint(request))


def crawl_fingerprinter(meta: dict[str, str], default: Any) -> Any:
    """The fingerprinter of a crawl whose meta hash is ``meta``: scrapy-redis's for a dupefilter
    adopted from scrapy-redis, else ``default`` (the crawler's ``request_fingerprinter``)."""
    if meta.get("fingerprinter") == SCRAPY_REDIS_FINGERPRINTER:
        return ScrapyRedisFingerprinter()
    return default


@dataclass(frozen=True)
class Found:
    """What :func:`prepare` found: the fingerprinter the crawl uses, and whether this worker holds
    the adoption lock and has requests to move (:func:`move`)."""

    fingerprinter: Any
    #: The scrapy-redis queue's Redis type (``zset`` or ``list``) when there are requests to move.
    kind: str | None = None
    locked: bool = False


def serializer_of(settings: BaseSettings) -> Any:
    """The module scrapy-redis serialized requests with: ``SCHEDULER_SERIALIZER`` (an importable
    module path, or a module), else pickle. Raises :class:`AdoptionError` naming the setting."""
    value = settings.get("SCHEDULER_SERIALIZER")
    if not value:
        import pickle

        return pickle
    try:
        module = importlib.import_module(value) if isinstance(value, str) else value
    except ImportError as exc:
        raise AdoptionError(f"Setting SCHEDULER_SERIALIZER={value!r} cannot be imported ({exc})") from None
    if not callable(getattr(module, "loads", None)):
        raise AdoptionError(f"Setting SCHEDULER_SERIALIZER={value!r} has no loads() to read the queued requests")
    return module


async def prepare(
    client: Redis, keys: Keys, spider: Spider, settings: BaseSettings, default_fingerprinter: Any, node_id: str
) -> Found:
    """Before the crawl's meta is claimed: find a scrapy-redis crawl in ``keys`` and the
    fingerprinter to claim it with; take the adoption lock and rename the queue when there are
    requests to move. A worker that finds another holding the lock waits for it (the holder
    renews it at every batch; a lock left by a worker that died expires after
    :data:`LOCK_TTL` seconds, and this worker goes on in its place). Raises
    :class:`AdoptionError`."""
    renamed, lock = keys.scrapy_redis_queue, keys.scrapy_redis_lock
    waited = False
    while True:
        async with client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.dupefilter_meta)
            pipe.type(keys.queue)
            pipe.type(keys.dupefilter)
            pipe.exists(renamed)
            raw_meta, queue_type, df_type, pending = await pipe.execute()
        meta = {text(k): text(v) for k, v in raw_meta.items()}
        queue_type, df_type = text(queue_type), text(df_type)
        ours = "probe" in meta
        foreign_queue = (
            not ours and queue_type in ("zset", "list") and not await _frontier_index(client, keys, queue_type)
        )
        if not (pending or foreign_queue or (not ours and df_type == "set")):
            return Found(crawl_fingerprinter(meta, default_fingerprinter))
        if not (pending or foreign_queue):
            # a scrapy-redis dupefilter and nothing queued: only the fingerprint to decide
            await _refuse_if_written(client, keys, queue_type)
            return Found(await _choose(client, keys, spider, settings, default_fingerprinter, []))
        if is_cluster(client):
            raise AdoptionError(
                f"{keys.queue} is a scrapy-redis queue on a Redis Cluster, whose hash slots this version cannot "
                "move it across: finish that crawl with scrapy-redis, or start over (another CRAWL_ID)"
            )
        if await client.set(lock, node_id, nx=True, ex=LOCK_TTL):
            break
        if not waited:
            logger.info(
                "Waiting for node %s to move the scrapy-redis queue of %r into the frontier",
                text(await client.get(lock) or b"?"),
                keys.crawl,
            )
            waited = True
        await asyncio.sleep(0.5)
    if foreign_queue:
        if pending:
            raise AdoptionError(
                f"{keys.queue} holds a scrapy-redis queue, and {renamed} holds one being adopted: move one of them "
                "away (redis-cli rename) and start again"
            )
        try:
            await _refuse_if_written(client, keys, queue_type)
        except AdoptionError:
            await client.delete(lock)
            raise
        await client.rename(keys.queue, renamed)
        kind = queue_type
    else:
        kind = text(await client.type(renamed))
    if ours:
        return Found(crawl_fingerprinter(meta, default_fingerprinter), kind, True)
    sample = await _read(client, renamed, kind, PROBE_SAMPLE)
    return Found(await _choose(client, keys, spider, settings, default_fingerprinter, sample), kind, True)


async def _refuse_if_written(client: Any, keys: Keys, queue_type: str) -> None:
    """Raise :class:`AdoptionError` when a scrapy-redis worker still writes the crawl: its queue's
    length or its dupefilter's size changes within :data:`QUIET` seconds. Such a worker would pop
    from the frontier's index of hosts once the queue is moved (and take a host's place in it with
    its next pop), or push pickled requests into it."""

    async def sizes() -> list[Any]:
        async with client.pipeline(transaction=False) as pipe:
            if queue_type == "zset":
                pipe.zcard(keys.queue)
            elif queue_type == "list":
                pipe.llen(keys.queue)
            pipe.scard(keys.dupefilter)
            return list(await pipe.execute())

    before = await sizes()
    await asyncio.sleep(QUIET)
    after = await sizes()
    if after != before:
        raise AdoptionError(
            f"a scrapy-redis worker is still crawling it ({keys.queue} and {keys.dupefilter} changed within "
            f"{QUIET:g}s): stop every scrapy-redis worker of the crawl (scrapyd jobs too), then start this one again"
        )


async def _frontier_index(client: Any, keys: Keys, queue_type: str) -> bool:
    """Whether ``<spider>:requests`` is the frontier's own index of hosts, not a scrapy-redis
    queue: a crawl whose meta is gone (cleared by its last worker) may have had requests put back
    since (``scrapy requeue``). Its first member is a host with a queue of its own
    (``<spider>:requests:<host>#0`` or, for its other priorities, ``<spider>:requests:<host>``);
    a scrapy-redis member is a serialized request, which names no key."""
    first = await client.zrange(keys.queue, 0, 0) if queue_type == "zset" else []
    if not first:
        return False
    host_queue = keys.queue_prefix.encode() + first[0]
    return bool(await client.exists(host_queue, host_queue + b"#0"))


async def _read(client: Any, key: str, kind: str, n: int) -> list[tuple[bytes, float]]:
    """Up to ``n`` of the queue's ``(member, -priority)``: a sorted set's lowest scores first (the
    order scrapy-redis pops them in); a list's tail first, its oldest requests: the order a FIFO
    (``RPOP``) pops them in, and, pushed in that order into a LIFO crawl's frontier (newest
    first), the order a LIFO (``LPOP``) pops them in. A list's score is 0: the request's own
    priority is in its payload."""
    if kind == "zset":
        return [(m, float(s)) for m, s in await client.zrange(key, 0, n - 1, withscores=True)]
    return [(m, 0.0) for m in reversed(await client.lrange(key, -n, -1))]


async def _choose(
    client: Redis, keys: Keys, spider: Spider, settings: BaseSettings, default: Any, sample: list[tuple[bytes, float]]
) -> Any:
    """scrapy-redis's fingerprinter, or Scrapy's when its fingerprints of the sample's requests
    (those without ``dont_filter``, which scrapy-redis added to the dupefilter when it queued
    them) and of the spider's ``start_urls`` are found more often in the dupefilter."""
    theirs = ScrapyRedisFingerprinter()
    serializer = serializer_of(settings)
    probes: list[Request] = []
    for member, _ in sample:
        try:
            request = request_from_dict(serializer.loads(member), spider=spider)
        except Exception:  # the move keeps it as a dead letter; here it only does not vote
            continue
        if not request.dont_filter:
            probes.append(request)
    for url in getattr(spider, "start_urls", None) or ():
        try:
            probes.append(Request(url))
        except (TypeError, ValueError):
            continue
    if not probes:
        return theirs
    async with client.pipeline(transaction=False) as pipe:
        pipe.smismember(keys.dupefilter, [theirs.fingerprint(r).hex() for r in probes])
        pipe.smismember(keys.dupefilter, [default.fingerprint(r).hex() for r in probes])
        hits_theirs, hits_scrapy = await pipe.execute()
    return default if sum(hits_scrapy) > sum(hits_theirs) else theirs


async def move(
    client: Redis,
    keys: Keys,
    frontier: Frontier,
    spider: Spider,
    found: Found,
    node_id: str,
    settings: BaseSettings,
    stats: StatsCollector,
) -> int:
    """Move the renamed scrapy-redis queue into ``frontier`` (see the module docstring), renewing
    the lock at each batch and releasing it at the end. Returns how many requests were queued;
    counts ``frontier/adopted`` and ``frontier/adopted/refused`` in the crawler's stats and logs
    one line."""
    renamed, lock, invalid = keys.scrapy_redis_queue, keys.scrapy_redis_lock, keys.scrapy_redis_invalid
    assert found.kind is not None
    serializer = serializer_of(settings)
    moved = refused = 0
    started = time.monotonic()
    while batch := await _read(client, renamed, found.kind, BATCH):
        entries: list[Entry] = []
        dead: list[str] = []
        for member, score in batch:
            try:
                request = request_from_dict(serializer.loads(member), spider=spider)
                payload = request_to_json(request, spider)
            except Exception as exc:  # a bad pickle, a callback the spider lost, a value JSON cannot hold
                detail = exc if isinstance(exc, RequestRefused) else f"{type(exc).__name__}: {exc}"
                dead.append(_dead_letter(member, score, detail, spider, node_id))
                continue
            # hex, as every dupefilter layout takes it; "adopted:" keeps it apart from any request's
            fingerprint = hashlib.sha1(b"adopted:" + member).hexdigest()
            host = queue_host(urlparse_cached(request).hostname)
            entries.append(Entry(fingerprint, host, -request.priority, payload))
        moved += await frontier.push(entries)
        if dead:
            await client.lpush(invalid, *dead)
            refused += len(dead)
        async with client.pipeline(transaction=True) as pipe:
            if found.kind == "zset":
                pipe.zrem(renamed, *(m for m, _ in batch))
            else:
                pipe.ltrim(renamed, 0, -len(batch) - 1)
            pipe.expire(lock, LOCK_TTL)
            await pipe.execute()
    await client.delete(lock)
    stats.inc_value("frontier/adopted", moved)
    if refused:
        stats.inc_value("frontier/adopted/refused", refused)
    logger.log(
        logging.WARNING if refused else logging.INFO,
        "Adopted the scrapy-redis crawl %r: %s moved from %s into the frontier in %.1fs%s",
        keys.crawl,
        plural(moved, "queued request"),
        keys.queue,
        time.monotonic() - started,
        f"; {plural(refused, 'request')} could not be read, kept in {invalid}" if refused else "",
    )
    return moved


def _dead_letter(member: bytes, score: float, detail: object, spider: Spider, node_id: str) -> str:
    return json.dumps(
        {
            "reason": "scrapy_redis_request",
            "detail": str(detail),
            "payload_base64": base64.b64encode(member).decode("ascii"),
            "score": score,
            "spider": spider.name,
            "node": node_id,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
