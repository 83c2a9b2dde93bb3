"""``scrapy requeue <spider>``: put the dead letters of ``<spider>:requests:failed`` back in the frontier."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.exceptions import UsageError

from scrapy_frontier.keys import queue_host
from scrapy_frontier.redis_command import RedisCommand
from scrapy_frontier.scripts import source
from scrapy_frontier.serialize import check_url
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    import argparse

    import redis

    from scrapy_frontier.keys import Keys

#: Meta keys reset on requeue, so the request gets its full retries again, at once.
_RESET_META = ("retry_times", "retry_not_before")


class Command(RedisCommand):
    def short_desc(self) -> str:
        return "Put failed requests (<spider>:requests:failed) back in the frontier"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--reason", help="only the dead letters with this reason (e.g. retries_exhausted)")
        parser.add_argument("--limit", type=int, default=0, help="at most this many (default 0: all)")

    def execute(self, client: redis.Redis, keys: Keys, opts: argparse.Namespace) -> dict[str, Any]:
        script = client.register_script(source("requeue"))
        raws = client.lrange(keys.failed, 0, -1)
        args: list[Any] = [keys.queue_prefix]
        skipped = 0
        if opts.limit < 0:
            raise UsageError("--limit must be 0 (all) or more")
        for raw in reversed(raws):  # oldest first
            try:
                record = json.loads(raw)
                if opts.reason and record.get("reason") != opts.reason:
                    continue
                request = record["request"]
                url = check_url(request["url"])
                meta = request.get("meta") or {}
                priority = request.get("priority", 0)
                if not isinstance(meta, dict) or not isinstance(priority, int) or isinstance(priority, bool):
                    raise TypeError("meta must be an object and priority an integer")
            except Exception:  # a record that is not a request stays where it is, counted
                skipped += 1
                continue
            for key in _RESET_META:
                meta.pop(key, None)
            request.update(url=url, meta=meta)
            host = queue_host(urlsplit(url).hostname)
            args += [raw, host, -priority, json.dumps(request, ensure_ascii=False, separators=(",", ":"))]
            if opts.limit and len(args) // 4 >= opts.limit:
                break
        if keys.shards:
            requeued = _requeue_sharded(client, keys, args[1:])
        else:
            requeued = int(script(keys=[keys.failed, keys.slots], args=args)) if len(args) > 1 else 0
        return {"requeued": requeued, "unreadable": skipped, "left": client.llen(keys.failed)}

    def describe(self, result: dict[str, Any]) -> str:
        text = f"requeued {plural(result['requeued'], 'request')}; {result['left']} left in the dead-letter list"
        if result["unreadable"]:
            text += (
                f" ({plural(result['unreadable'], 'record')} that "
                f"{'is not a request' if result['unreadable'] == 1 else 'are not requests'}, left there)"
            )
        return text


def _requeue_sharded(client: redis.Redis, keys: Keys, args: list[Any]) -> int:
    """Requeue into a sharded crawl, whose queues are in other hash slots than the dead-letter
    list: the requests of each shard are queued by one script call (``lua/requeue_shard.lua``,
    which keeps the shard's queued count), then their records removed from the list. A requeue
    cut off between the two leaves the records, requeued again next time (a request may then be
    fetched twice, never lost); so may two concurrent requeues."""
    script = client.register_script(source("requeue_shard"))
    by_shard: dict[str, tuple[Any, list[Any], list[bytes]]] = {}
    for i in range(0, len(args), 4):
        raw, host, score, payload = args[i : i + 4]
        sh = keys.shard_of(host)
        _, triples, raws = by_shard.setdefault(sh.queue, (sh, [], []))
        triples += (host, score, payload)
        raws.append(raw)
    requeued = 0
    for sh, triples, raws in by_shard.values():
        script(keys=[sh.queue], args=[sh.queue_prefix, *triples])
        with client.pipeline(transaction=False) as pipe:
            for raw in raws:
                pipe.lrem(keys.failed, 1, raw)  # type: ignore[arg-type]  # redis-py types value as str; LREM takes bytes
            requeued += sum(pipe.execute())
    return requeued
