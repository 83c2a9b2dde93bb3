"""A crawl's counts (:class:`Status`): read by the scheduler's idle check and the progress line
(:meth:`scrapy_frontier.frontier.Frontier.status`) and, with a blocking client, by ``scrapy status``
(:func:`read_status`). The counting is ``lua/frontier_status.lua``, one call per shard."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from scrapy_frontier.scripts import source

if TYPE_CHECKING:
    import redis as sync_redis

    from scrapy_frontier.keys import Keys


@dataclass(frozen=True)
class Status:
    """Counts of a crawl, every shard summed: hosts with queued requests, requests queued
    (``depth``; 0 unless read ``deep``), requests under lease, live nodes, start URLs waiting,
    fingerprints seen, dead letters."""

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


def flag(value: bool) -> str:
    return "1" if value else "0"


def status_calls(keys: Keys, nodes: Sequence[bytes | str], deep: bool) -> list[tuple[list[str], list[Any]]]:
    return [
        ([sh.queue, sh.dupefilter, sh.bloom], [sh.queue_prefix, sh.lease_prefix, flag(deep), *nodes])
        for sh in keys.all_shards()
    ]


def crawl_counts(pipe: Any, keys: Keys, as_set: bool, nodes: Sequence[bytes | str]) -> None:
    """Queue, on ``pipe``, the crawl-wide reads of a status: start URLs, dead letters, and the
    start-URL leases of a sharded crawl."""
    pipe.scard(keys.start_urls) if as_set else pipe.llen(keys.start_urls)
    pipe.llen(keys.failed)
    if keys.shards:
        for node in nodes:
            pipe.hlen(keys.start_leases(node.decode() if isinstance(node, bytes) else node))


def make_status(nodes: Sequence[Any], shard_counts: Iterable[Sequence[Any]], crawl: Sequence[Any]) -> Status:
    hosts = depth = inflight = seen = 0
    for h, d, i, s in shard_counts:
        hosts, depth, inflight, seen = hosts + int(h), depth + int(d), inflight + int(i), seen + int(s)
    starts, failed, *start_leases = (int(v) for v in crawl)
    return Status(hosts, depth, inflight + sum(start_leases), len(nodes), starts, seen, failed)


def read_status(client: sync_redis.Redis, keys: Keys, *, deep: bool = True, start_urls_as_set: bool = False) -> Status:
    """The :class:`Status` of a crawl, read with a blocking client (``scrapy status``): the
    counts of every shard summed; ``deep`` also reads the queued requests (each shard's
    count, ``<queue prefix>@queued``; a shard without one is counted host by host once)."""
    nodes = cast("list[bytes]", client.zrange(keys.nodes, 0, -1))
    script = client.register_script(source("frontier_status"))
    counts = [script(keys=k, args=a) for k, a in status_calls(keys, nodes, deep)]
    with client.pipeline(transaction=False) as pipe:
        crawl_counts(pipe, keys, start_urls_as_set, nodes)
        crawl = pipe.execute()
    return make_status(nodes, counts, crawl)
