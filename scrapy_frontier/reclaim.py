"""Giving leases back to the frontier: the ``frontier_restore`` calls that return every lease of
some nodes (:func:`restore_calls`, used by a node leaving, :meth:`Frontier.release
<scrapy_frontier.frontier.Frontier.release>`), and the reclaim of dead nodes' leases with a
blocking client (:func:`reclaim_dead`, run by the heartbeat thread, :mod:`scrapy_frontier.nodes`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from scrapy_frontier.keys import START_LEASE_PREFIX
from scrapy_frontier.scripts import source
from scrapy_frontier.status import flag

if TYPE_CHECKING:
    import redis as sync_redis

    from scrapy_frontier.keys import Keys


def restore_calls(keys: Keys, nodes: Sequence[str], as_set: bool) -> list[tuple[list[str], list[str]]]:
    """The (keys, args) of the ``frontier_restore`` calls that give back every lease of
    ``nodes``: one per shard, and one for the start-URL leases of a sharded crawl."""
    calls = []
    for sh in keys.all_shards():
        start = keys.start_urls if not keys.shards else sh.queue
        calls.append(
            (
                [sh.queue, start, *(sh.leases(n) for n in nodes)],
                [sh.queue_prefix, sh.politeness_prefix, flag(as_set), START_LEASE_PREFIX],
            )
        )
    if keys.shards:
        calls.append(
            (
                [keys.start_urls, keys.start_urls, *(keys.start_leases(n) for n in nodes)],
                ["", "", flag(as_set), START_LEASE_PREFIX],
            )
        )
    return calls


def reclaim_dead(
    client: sync_redis.Redis, keys: Keys, timeout_ms: int, *, start_urls_as_set: bool = False
) -> tuple[int, int]:
    """With a blocking client (the heartbeat thread, :mod:`scrapy_frontier.nodes`): return to the
    frontier the leases of every node whose last heartbeat is older than ``timeout_ms`` (at the
    Redis server's time), and the pending items it was replaying to the pending list, then drop
    those nodes from the registry. Each shard's restore is atomic; the nodes stay registered until
    every shard is done, so a reclaim cut off halfway is finished by the next one. Returns
    (leases and items restored, nodes dropped)."""
    dead = [n.decode() for n in client.register_script(source("nodes_dead"))(keys=[keys.nodes], args=[timeout_ms])]
    if not dead:
        return 0, 0
    restore = client.register_script(source("frontier_restore"))
    restored = sum(int(restore(keys=k, args=a)) for k, a in restore_calls(keys, dead, start_urls_as_set))
    for node in dead:
        restored += _unreplay(client, keys, node)
    dropped = [
        n.decode() for n in client.register_script(source("nodes_forget"))(keys=[keys.nodes], args=[timeout_ms, *dead])
    ]
    if dropped:
        client.delete(*(keys.node_info(n) for n in dropped))
    return restored, len(dropped)


def _unreplay(client: sync_redis.Redis, keys: Keys, node: str) -> int:
    """Move the pending items ``node`` was replaying back to the pending list."""
    moved = 0
    while client.lmove(keys.items_replaying(node), keys.items_pending, "LEFT", "RIGHT"):
        moved += 1
    return moved
