"""Joining a shared crawl: connect, check what Redis holds, claim the dupefilter, agree on the
shard layout, build the frontier and the heartbeat (:func:`join`)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis.exceptions

from scrapy_frontier import adopt
from scrapy_frontier.config import fail_at_open, failed_at_open
from scrapy_frontier.connection import (
    REDIS_FAILURES,
    ConfigError,
    describe_error,
    detect_cluster,
    is_cluster,
    redact_url,
    sync_redis,
    text,
)
from scrapy_frontier.deadletter import DeadLetters
from scrapy_frontier.dupefilter import CLUSTER_SHARDS, DedupConfig, DupefilterMismatch, fingerprinter_id, record_shards
from scrapy_frontier.dupefilter import claim as claim_dupefilter
from scrapy_frontier.frontier import LEASE_MARK, Frontier
from scrapy_frontier.keys import Keys, register
from scrapy_frontier.nodes import Heartbeat, server_clock
from scrapy_frontier.payload import START_PREFIX
from scrapy_frontier.redis_health import RedisHealth
from scrapy_frontier.scheduler.flush import flush_on_start
from scrapy_frontier.scheduler.seen_cache import SeenCache
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from scrapy import Spider
    from scrapy.crawler import Crawler

    from scrapy_frontier.scheduler.config import SchedulerConfig

logger = logging.getLogger(__name__)

#: What adopting a scrapy-redis crawl may fail with: its own refusal, or Redis's failure.
ADOPTION_FAILURES: tuple[type[BaseException], ...] = (adopt.AdoptionError, *REDIS_FAILURES)

#: Entries each frontier shard's seen feed keeps, about (one per push call): a few seconds of a
#: busy crawl. A worker that looks less often misses some, which costs it only dedup checks in Redis.
SEEN_FEED_ENTRIES = 500


@dataclass(frozen=True)
class NodeHooks:
    """What the heartbeat thread calls (:class:`~scrapy_frontier.nodes.Heartbeat`): ``info()``, the
    node's facts to publish; ``dropped()``, when this node finds it had been declared dead;
    ``reclaimed(leases, nodes)``, when it took back dead nodes' leases; ``state_lost()``, when the
    crawl's epoch is gone from Redis (:attr:`Session.epoch`)."""

    info: Callable[[], dict[str, Any]]
    dropped: Callable[[], None]
    reclaimed: Callable[[int, int], None]
    state_lost: Callable[[], None]


@dataclass(frozen=True)
class Session:
    """A worker's place in a shared crawl, ready to use: the heartbeat beats (its thread is not
    started yet: :meth:`~scrapy_frontier.nodes.Heartbeat.start`)."""

    client: Redis
    keys: Keys
    frontier: Frontier
    heartbeat: Heartbeat
    dedup: DedupConfig
    dead: DeadLetters
    seen: SeenCache
    #: The crawl's identity in Redis (``epoch`` in ``<spider>:dupefilter:meta``), written by its
    #: first worker: gone or changed, the crawl's state was lost (Redis restarted without
    #: persistence, or a replica that had not synced was promoted).
    epoch: bytes
    #: The crawl's request fingerprinter: the crawler's, or scrapy-redis's for a dupefilter
    #: adopted from scrapy-redis (:func:`~scrapy_frontier.adopt.crawl_fingerprinter`).
    fingerprinter: Any


async def join(
    crawler: Crawler, config: SchedulerConfig, spider: Spider, node_id: str, health: RedisHealth, hooks: NodeHooks
) -> Session | None:
    """Join the crawl of ``spider`` as ``node_id``. Returns ``None`` when the crawl cannot be
    joined: the reason was logged in one line and the crawl stops once open
    (:func:`~scrapy_frontier.config.fail_at_open`), with nothing written to Redis that a crawl of
    the same settings would not write. Refused: Redis that cannot be reached or refuses the
    password; start URLs of another Redis type than ``REDIS_START_URLS_AS_SET`` says; a
    dupefilter written by another fingerprinter or layout; a crawl written by an unreleased
    development version; a shard layout this worker cannot use."""
    url = config.redis_url
    keys = Keys.for_spider(crawler.settings, spider.name, redis_key=config.start_urls_key)
    if failed_at_open(crawler) or config.dedup is None:
        return None  # a setting already stops the crawl: join nothing, write nothing
    try:
        client = await detect_cluster(crawler)
        await client.ping()
        found = text(await client.type(keys.start_urls))
    except ConfigError as exc:
        fail_at_open(crawler, "%s", exc)
        return None
    except redis.exceptions.AuthenticationError as exc:
        fail_at_open(crawler, "REDIS_URL %s: authentication failed (%s)", redact_url(url), describe_error(exc))
        return None
    except REDIS_FAILURES as exc:
        fail_at_open(crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
        return None
    wanted = "set" if config.start_as_set else "list"
    if found not in ("none", wanted):
        setting = "REDIS_START_URLS_AS_SET=True" if wanted == "set" else "REDIS_START_URLS_AS_SET=False (the default)"
        fail_at_open(
            crawler,
            "%s is a Redis %s, but with %s start URLs are a %s: set REDIS_START_URLS_AS_SET to match it, "
            "or move the key away (redis-cli rename)",
            keys.start_urls,
            found,
            setting,
            wanted,
        )
        return None
    if config.flush_on_start and not await flush_on_start(crawler, client, keys, node_id, config.node_timeout):
        return None
    try:
        adoption = await adopt.prepare(client, keys, spider, crawler.settings, crawler.request_fingerprinter, node_id)
    except ADOPTION_FAILURES as exc:
        adoption_failed(crawler, url, keys, exc)
        return None
    try:
        claimed = await claim_dupefilter(client, keys, config.dedup, adoption.fingerprinter)
        shards = await record_shards(client, keys, shards_for(config, client))
        # the layout the crawl recorded: a scrapy-redis set kept, the packed buckets' count
        meta = {text(k): text(v) for k, v in (await client.hgetall(keys.dupefilter_meta)).items()}
    except DupefilterMismatch as exc:
        fail_at_open(crawler, "%s", exc)
        return None
    except REDIS_FAILURES as exc:
        fail_at_open(
            crawler,
            "REDIS_URL %s: cannot read the dupefilter %s (%s)",
            redact_url(url),
            keys.dupefilter,
            describe_error(exc),
        )
        return None
    if "ranked" not in meta:
        fail_at_open(
            crawler,
            "The crawl %r was written by a development version of scrapy-frontier whose queues this "
            "version cannot read (%s has no 'ranked' field): finish it with that version, or start the "
            "crawl over (another CRAWL_ID, or delete its keys)",
            keys.crawl,
            keys.dupefilter_meta,
        )
        return None
    try:
        old = 0 if claimed else await old_format_leases(client, keys.with_shards(shards))
    except REDIS_FAILURES as exc:
        fail_at_open(crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
        return None
    if old:
        fail_at_open(
            crawler,
            "The crawl %r has %s held in a format of a development version of scrapy-frontier that this "
            "version cannot give back: finish the crawl with that version, or start it over (another "
            "CRAWL_ID, or delete its keys)",
            keys.crawl,
            plural(old, "lease"),
        )
        return None
    dedup = config.dedup.for_stored(meta)
    if claimed:
        logger.info(
            "Dupefilter %s: layout %s, written by %s",
            keys.dupefilter,
            dedup.layout,
            fingerprinter_id(adoption.fingerprinter)[0],
        )
    if not shards_agree(crawler, config, keys, client, shards):
        return None
    wanted_order = "lifo" if config.queue_order == "lifo" else "fifo"
    try:
        async with client.pipeline(transaction=False) as pipe:
            pipe.hsetnx(keys.dupefilter_meta, "epoch", secrets.token_hex(8))
            pipe.hget(keys.dupefilter_meta, "epoch")
            pipe.hsetnx(keys.dupefilter_meta, "order", wanted_order)
            pipe.hget(keys.dupefilter_meta, "order")
            _, epoch, _, stored_order = await pipe.execute()
    except REDIS_FAILURES as exc:
        fail_at_open(crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
        return None
    if not await shard_epochs_agree(crawler, client, keys.with_shards(shards), epoch):
        return None
    order = text(stored_order)
    if order != wanted_order:
        logger.warning(
            "The crawl %r serves requests %s (order=%s in %s, from its first worker's SCHEDULER_QUEUE_CLASS); "
            "this worker does the same",
            keys.crawl,
            "last in, first out" if order == "lifo" else "first in, first out",
            order,
            keys.dupefilter_meta,
        )
    elif order == "lifo":
        logger.info(
            "Requests are served last in, first out (SCHEDULER_QUEUE_CLASS=%s): each host's newest first among "
            "those of one priority, a higher priority first",
            crawler.settings.get("SCHEDULER_QUEUE_CLASS"),
        )
    keys = keys.with_shards(shards)
    register(crawler, keys)
    local_seen = config.local_seen_max
    if is_cluster(client) or str(url).startswith(("redis+sentinel", "rediss+sentinel")):
        # A failover can lose the last writes without this worker seeing an error (redis-py
        # retries on the new master): a link it queued then must reach the shared dupefilter
        # again when its page is crawled again, not stop at this worker's first look.
        local_seen = 0
    frontier = Frontier(
        client,
        keys,
        node_id,
        start_urls_as_set=config.start_as_set,
        default_rate=config.domain_rate,
        concurrency_cap=config.domain_concurrency,
        autothrottle=config.autothrottle,
        dedup=dedup,
        wait_replicas=wait_replicas_for(config, client),
        wait_timeout=config.wait_timeout,
        # a recrawl age lets a URL through again: a worker must not skip it on another's word
        seen_feed=SEEN_FEED_ENTRIES if local_seen and dedup.layout != "zset" else 0,
        lifo=order == "lifo",
    )
    if adoption.locked:
        try:
            await adopt.move(client, keys, frontier, spider, adoption, node_id, crawler.settings, crawler.stats)
        except ADOPTION_FAILURES as exc:
            adoption_failed(crawler, url, keys, exc)
            return None
    heartbeat = Heartbeat(
        sync_redis(crawler.settings),
        keys,
        node_id,
        interval=config.heartbeat_interval,
        timeout=config.node_timeout,
        start_urls_as_set=config.start_as_set,
        info=hooks.info,
        on_dropped=hooks.dropped,
        on_reclaimed=hooks.reclaimed,
        clock=server_clock(crawler),
        health=health,
        epoch=epoch,
        on_state_lost=hooks.state_lost,
    )
    try:
        await asyncio.to_thread(heartbeat.beat)
        await asyncio.to_thread(heartbeat.reclaim)
    except REDIS_FAILURES as exc:
        heartbeat.client.close()
        fail_at_open(crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))
        return None
    layout = f", {shards} frontier shards" if shards else ""
    if frontier.wait_replicas:
        layout += f", pushes on {frontier.wait_replicas} replica(s) before acknowledgements"
    logger.info("Joined the crawl %r on %s%s as node %s", keys.crawl, redact_url(url), layout, node_id)
    dead = DeadLetters(client, config.dead_letter_dir)
    return Session(client, keys, frontier, heartbeat, dedup, dead, SeenCache(local_seen), epoch, adoption.fingerprinter)


async def old_format_leases(client: Any, keys: Keys) -> int:
    """How many leases of the crawl's registered nodes are not in the lease field format
    (``<lease id>\\t<score>\\t<host>``, or a start URL's): such a lease, written by a development
    version, would be given back broken. One ``HKEYS`` per node and shard, pipelined: a joining
    worker's one look at what the crawl's nodes hold."""
    nodes = [text(n) for n in await client.zrange(keys.nodes, 0, -1)]
    if not nodes:
        return 0
    async with client.pipeline(transaction=False) as pipe:
        for node in nodes:
            for sh in keys.all_shards():
                pipe.hkeys(sh.leases(node))
        replies = await pipe.execute()
    return sum(
        1 for fields in replies for f in fields if b"\t" not in f and f != LEASE_MARK and not f.startswith(START_PREFIX)
    )


def adoption_failed(crawler: Crawler, url: str | None, keys: Keys, exc: BaseException) -> None:
    """Report (at open) why a scrapy-redis crawl could not be adopted: the adoption's own reason,
    or Redis's failure."""
    if isinstance(exc, adopt.AdoptionError):
        fail_at_open(crawler, "Cannot adopt the scrapy-redis crawl %r: %s", keys.crawl, exc)
    else:
        fail_at_open(crawler, "REDIS_URL %s: cannot use Redis (%s)", redact_url(url), describe_error(exc))


async def shard_epochs_agree(crawler: Crawler, client: Any, keys: Keys, epoch: bytes) -> bool:
    """Copy the crawl's ``epoch`` into each shard's slot (:meth:`~scrapy_frontier.keys.Keys.epoch_keys`,
    a sharded crawl), where it is missing, and refuse (at open) a shard that holds another: part
    of the crawl's state was lost (a Redis Cluster master that lost its data, or the meta did).
    A master that loses its data later is found by the heartbeat."""
    shard_epochs = keys.epoch_keys()
    if not shard_epochs:
        return True
    try:
        async with client.pipeline(transaction=False) as pipe:
            for key in shard_epochs:
                pipe.set(key, epoch, nx=True)
            for key in shard_epochs:
                pipe.get(key)
            found = (await pipe.execute())[len(shard_epochs) :]
    except REDIS_FAILURES as exc:
        fail_at_open(crawler, "Cannot use Redis (%s)", describe_error(exc))
        return False
    other = [key for key, value in zip(shard_epochs, found) if value != epoch]
    if other:
        fail_at_open(
            crawler,
            "The crawl %r's state in Redis is partly gone: %s holds another epoch than %s (%s): a Redis Cluster "
            "master lost its data, or the crawl's meta did. Start the crawl over (another CRAWL_ID, or delete its "
            'keys); docs/operating.md, "When things fail"',
            keys.crawl,
            plural(len(other), "shard"),
            keys.dupefilter_meta,
            text(epoch),
        )
        return False
    return True


def shards_for(config: SchedulerConfig, client: Any) -> int:
    """The shard count a new crawl records: ``FRONTIER_SHARDS``, else none on a single Redis and
    :data:`~scrapy_frontier.dupefilter.CLUSTER_SHARDS` on a Redis Cluster."""
    if config.shards is not None:
        return config.shards
    return CLUSTER_SHARDS if is_cluster(client) else 0


def wait_replicas_for(config: SchedulerConfig, client: Any) -> int:
    """``FRONTIER_WAIT_REPLICAS``, else 1 on a Redis Cluster whose slot map lists replicas (shards
    on several masters: see :meth:`Frontier.push <scrapy_frontier.frontier.Frontier.push>`), else 0."""
    if config.wait_replicas is not None:
        return config.wait_replicas
    return 1 if is_cluster(client) and client.get_replicas() else 0


def shards_agree(crawler: Crawler, config: SchedulerConfig, keys: Keys, client: Any, shards: int) -> bool:
    """Refuse (at open) a recorded layout this worker cannot use, or one that differs from an
    explicit ``FRONTIER_SHARDS``."""
    if shards == 0 and is_cluster(client):
        fail_at_open(
            crawler,
            "The crawl %r was started unsharded on a single Redis (%s:meta shards=0); it cannot go on on a "
            "Redis Cluster: start it over on the cluster (another CRAWL_ID) or keep it on a single Redis",
            keys.crawl,
            keys.dupefilter,
        )
        return False
    if config.shards is not None and config.shards != shards:
        fail_at_open(
            crawler,
            "Setting FRONTIER_SHARDS=%s differs from the crawl's recorded layout (%s:meta shards=%s): every "
            "worker of a crawl uses the recorded one; leave FRONTIER_SHARDS unset, or start a new crawl "
            "(another CRAWL_ID)",
            config.shards,
            keys.dupefilter,
            shards,
        )
        return False
    return True
