"""``scrapy status [<spider>]``: the state of a distributed crawl, read from Redis; without a
spider, every crawl recorded in this Redis database (``scrapy-frontier:crawls``), one line each.
``--watch SECONDS`` reads it again every SECONDS: redrawn in place on a terminal (as ``watch``
does), appended otherwise (a pipe, a file) and with ``--json`` (one object per line)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, cast

import redis as redis_module
from scrapy.settings import Settings

from scrapy_frontier.config import read_value
from scrapy_frontier.connection import (
    ConfigError,
    describe_error,
    redact_url,
    redis_url,
    sync_redis,
    text,
)
from scrapy_frontier.keys import CRAWLS_KEY, Keys
from scrapy_frontier.politeness import busiest, busy_hosts, concurrency_cap, read_busy_hosts, read_limited_sample
from scrapy_frontier.redis_command import OutputClosed, RedisCommand, recorded_shards, write_out
from scrapy_frontier.scripts import source
from scrapy_frontier.status import read_status
from scrapy_frontier.wording import duration, plural

if TYPE_CHECKING:
    import argparse

    import redis


def crawl_status(
    client: redis.Redis, keys: Keys, *, start_urls_as_set: bool = False, settings: Settings | None = None
) -> dict[str, Any]:
    """Frontier, leases, workers, dead-letter counts and cluster totals (``<spider>:stats``, as
    ``totals``: field -> int, e.g. ``pages``, ``items_stored``, ``responses/200``) of one crawl,
    its name (``crawl``: ``<spider>`` or ``<spider>@<CRAWL_ID>``), ``state``
    (:func:`crawl_state`) and its ``busy_hosts`` (:func:`read_busy`, with the live workers' rate
    and cap, else those ``settings`` give)."""
    status = read_status(client, keys, deep=True, start_urls_as_set=start_urls_as_set)
    seconds, micros = client.time()  # the server's clock, as the heartbeats (a worker's may be off)
    now = seconds + micros / 1e6
    shards = keys.all_shards()
    per_node = 1 + len(shards) + (1 if keys.shards else 0)
    lease_count = source("lease_count")
    with client.pipeline(transaction=False) as pipe:
        # withscores: (member, score) pairs, which redis-py's return type does not tell apart
        scored = cast("list[tuple[bytes, float]]", client.zrange(keys.nodes, 0, -1, withscores=True))
        nodes = [(text(node), beat) for node, beat in scored]
        for node, _ in nodes:
            pipe.hgetall(keys.node_info(node))
            for sh in shards:
                pipe.eval(lease_count, 1, sh.leases(node))
            if keys.shards:
                pipe.eval(lease_count, 1, keys.start_leases(node))
        for key in (keys.start_urls_invalid, keys.items_invalid, keys.items_pending):
            pipe.llen(key)
        pipe.hgetall(keys.stats)
        answers = pipe.execute()
    workers = []
    for i, (node, beat) in enumerate(nodes):
        info = {text(k): text(v) for k, v in answers[per_node * i].items()}
        started = float(info.get("started", now))
        pages = int(info.get("pages", 0))
        workers.append(
            {
                "node": node,
                "host": info.get("host"),
                "pid": int(info.get("pid", 0)),
                "pages": pages,
                "items": int(info.get("items", 0)),
                "leases": sum(answers[per_node * i + 1 : per_node * (i + 1)]),
                "pages_per_min": round(pages / max(1.0, now - started) * 60, 1),
                "last_beat_s": round(now - beat / 1000, 1),
                "metrics": info.get("metrics"),
            }
        )
    start_invalid, items_invalid, items_pending, totals = answers[-4:]
    revisits = read_revisits(client, keys, {k.decode(): int(v) for k, v in totals.items()})
    # the crawl's DOMAIN_RATE_LIMIT and DOMAIN_CONCURRENCY as a live worker applies them (its -s and
    # environment, recorded in its node info), else as this command's settings give them
    settings = settings or Settings()
    rate = float(read_value(settings, "DOMAIN_RATE_LIMIT") or 0.0)
    cap = concurrency_cap(read_value(settings, "DOMAIN_CONCURRENCY"), settings)
    for i in range(len(nodes)):
        info = answers[per_node * i]
        if b"domain_rate" in info and b"domain_concurrency" in info:
            rate, cap = float(info[b"domain_rate"]), int(info[b"domain_concurrency"])
            break
    return {
        "crawl": keys.crawl,
        "spider": keys.spider,
        "state": crawl_state(status.idle, len(workers), revisits["scheduled"] + revisits["due"]),
        "frontier": {
            "queued": status.depth,
            "hosts": status.hosts,
            "in_flight": status.inflight,
            "start_urls_waiting": status.start_urls,
        },
        "dupefilter_size": status.seen,
        "workers": workers,
        "pages": sum(w["pages"] for w in workers),
        "items": sum(w["items"] for w in workers),
        "dead_letters": {
            "requests_failed": status.failed,
            "start_urls_invalid": start_invalid,
            "items_invalid": items_invalid,
            "items_pending": items_pending,
        },
        "idle": status.idle,
        "totals": {k.decode(): int(v) for k, v in sorted(totals.items())},
        "busy_hosts": read_busy(client, keys, rate, cap, now),
        "revisits": revisits,
    }


def read_revisits(client: redis.Redis, keys: Keys, totals: dict[str, int]) -> dict[str, Any]:
    """The revisit schedule (docs/revisits.md): pages ``scheduled``, ``due`` now (due and not yet
    queued), how long the longest-waiting of them is ``overdue_s`` (seconds, 0: none), when the
    next one is due (``next_due_in_s``, ``None``: none scheduled or some due now), and the share
    of revisits answered 304 (``not_modified_share``, ``None`` before any revisit), every shard's
    due times read on Redis's clock."""
    replies = revisit_counts(client, keys)
    scheduled = sum(r[0] for r in replies)
    due = sum(r[1] for r in replies)
    # r[2]: ms the shard's earliest page is overdue (negative: due in that many ms)
    lates = [r[2] for r in replies if r[0]]
    late = max(lates) / 1000 if lates else None
    revisits = totals.get("revisits_changed", 0) + totals.get("revisits_unchanged", 0)
    return {
        "scheduled": scheduled,
        "due": due,
        "overdue_s": round(max(0.0, late), 1) if late is not None else 0.0,
        "next_due_in_s": round(-late, 1) if late is not None and late < 0 else None,
        "not_modified_share": round(totals.get("revisits_not_modified", 0) / revisits, 3) if revisits else None,
    }


def read_busy(client: redis.Redis, keys: Keys, rate: float, cap: int, now: float) -> list[dict[str, Any]]:
    """The busy hosts of the crawl (:func:`~scrapy_frontier.politeness.busy_hosts`), read with
    ``rate`` (``DOMAIN_RATE_LIMIT``, requests/second) and ``cap`` (``DOMAIN_CONCURRENCY``).
    ``now``: the server's Unix time."""
    shards = keys.all_shards()
    with client.pipeline(transaction=False) as pipe:
        for sh in shards:
            pipe.hgetall(sh.inflight)
        read_limited_sample(pipe, keys)
        replies = pipe.execute()
        counts = busiest(replies[: len(shards)], limited=replies[len(shards) :])
    if not counts:
        return []
    with client.pipeline(transaction=False) as pipe:
        read_busy_hosts(pipe, keys, counts)
        replies = pipe.execute()
    return busy_hosts(counts, replies, rate, cap, now)


def crawl_state(idle: bool, workers: int, scheduled: int = 0) -> str:
    """``idle`` (nothing queued, in flight, waiting or scheduled for a revisit), ``revisiting``
    (nothing but ``scheduled`` pages, waiting for their revisit, and a worker alive), ``running``
    (work left and a worker alive) or ``stalled`` (work left and no worker alive: nothing moves
    until one starts)."""
    if idle and not scheduled:
        return "idle"
    if not workers:
        return "stalled"
    return "revisiting" if idle else "running"


def revisit_counts(client: redis.Redis, keys: Keys) -> list[list[int]]:
    """Each shard's revisit schedule at a glance (``lua/revisit_count.lua``), one call a shard:
    a Redis Cluster's pipeline takes no script."""
    script = client.register_script(source("revisit_count"))
    return [
        [int(v) for v in script(keys=[sh.revisit_wheel, sh.revisit_meta, sh.revisit_due])] for sh in keys.all_shards()
    ]


def scheduled_revisits(client: redis.Redis, keys: Keys) -> int:
    """The pages in the crawl's revisit schedule, every shard."""
    return sum(r[0] for r in revisit_counts(client, keys))


def list_crawls(client: redis.Redis, settings: Settings) -> list[dict[str, Any]]:
    """One summary per crawl recorded in ``scrapy-frontier:crawls`` (``CRAWLS_KEY``), sorted by
    name: ``crawl``, ``spider``, ``crawl_id``, ``idle``, ``state`` (:func:`crawl_state`), ``hosts``
    (with queued requests), ``start_urls_waiting``, ``in_flight``, ``workers``, ``seen``,
    ``requests_failed``. Two script calls per crawl; the per-host queues are not counted
    (``scrapy status <spider>`` does)."""
    out = []
    registry = settings.get("CRAWLS_KEY") or CRAWLS_KEY
    for raw in sorted(client.smembers(registry)):
        crawl = text(raw)
        spider, _, crawl_id = crawl.partition("@")
        crawl_settings = settings.copy()
        crawl_settings.set("CRAWL_ID", crawl_id, "cmdline")
        keys = Keys.for_spider(crawl_settings, spider)
        keys = keys.with_shards(recorded_shards(client, keys))
        status = read_status(client, keys, deep=False, start_urls_as_set=settings.getbool("REDIS_START_URLS_AS_SET"))
        out.append(
            {
                "crawl": crawl,
                "spider": spider,
                "crawl_id": crawl_id or None,
                "idle": status.idle,
                "state": crawl_state(status.idle, status.nodes, scheduled_revisits(client, keys)),
                "hosts": status.hosts,
                "start_urls_waiting": status.start_urls,
                "in_flight": status.inflight,
                "workers": status.nodes,
                "seen": status.seen,
                "requests_failed": status.failed,
            }
        )
    return out


class Command(RedisCommand):
    def syntax(self) -> str:
        return "[options] [<spider>]"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            return super().run(args, opts)
        assert self.settings is not None
        try:
            client = sync_redis(self.settings)
            crawls = list_crawls(client, self.settings)
        except ConfigError as exc:
            self._fail(str(exc))
            return None
        except redis_module.exceptions.RedisError as exc:
            self._fail(f"REDIS_URL {redact_url(redis_url(self.settings))}: {describe_error(exc)}")
            return None
        try:
            if opts.json:
                write_out(json.dumps({"crawls": crawls}, ensure_ascii=False))
                return None
            if not crawls:
                write_out("no crawl recorded in this Redis database")
            for c in crawls:
                write_out(
                    f"{c['crawl']}: {c['state']}, {plural(c['workers'], 'worker')}, "
                    f"{plural(c['hosts'], 'host')} queued, "
                    f"{c['in_flight']} in flight, "
                    f"{plural(c['start_urls_waiting'], 'start URL')} waiting, {c['seen']} seen, "
                    f"{c['requests_failed']} failed"
                )
        except OutputClosed as exc:
            self.output_stopped(exc)
        return None

    def short_desc(self) -> str:
        return "Show a distributed crawl: frontier depth, in-flight leases, live workers, dead letters"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--watch",
            type=float,
            metavar="SECONDS",
            help="read it again every SECONDS until interrupted (redrawn in place on a terminal)",
        )

    def execute(self, client: redis.Redis, keys: Keys, opts: argparse.Namespace) -> dict[str, Any] | None:
        assert self.settings is not None
        as_set = self.settings.getbool("REDIS_START_URLS_AS_SET")
        if opts.watch is not None:
            if not opts.watch > 0:  # 0, negative or NaN
                self._fail("--watch needs a positive number of seconds")
                return None
            redraw = not opts.json and sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"
            try:
                while True:
                    result = crawl_status(client, keys, start_urls_as_set=as_set, settings=self.settings)
                    if redraw:
                        # Cursor home, the new text with each line's old tail cleared, then the rest
                        # of the screen (ECMA-48 CUP, EL, ED): one write, no blank flash.
                        header = (
                            f"every {opts.watch:g}s: scrapy status {keys.spider}    {time.strftime('%H:%M:%S')} "
                            "(Ctrl-C stops)"
                        )
                        text = f"{header}\n\n{self.describe(result)}".replace("\n", "\x1b[K\n")
                        write_out(f"\x1b[H{text}\x1b[K\x1b[J")
                    else:
                        self.emit(result, opts)
                    time.sleep(opts.watch)
            except KeyboardInterrupt:
                return None
        return crawl_status(client, keys, start_urls_as_set=as_set, settings=self.settings)

    def describe(self, result: dict[str, Any]) -> str:
        f, d = result["frontier"], result["dead_letters"]
        lines = [
            f"crawl {result['crawl']!r}: {result['state']}"
            + (" (work is left and no worker is alive: start one to go on)" if result["state"] == "stalled" else ""),
            f"  progress: {progress(result)}",
            f"  frontier: {f['queued']} queued on {plural(f['hosts'], 'host')}, {f['in_flight']} in flight, "
            f"{plural(f['start_urls_waiting'], 'start URL')} waiting",
            f"  seen (dupefilter): {result['dupefilter_size']}; pages {result['pages']}, items {result['items']} "
            "(live workers)",
            f"  dead letters: {plural(d['requests_failed'], 'failed request')}, "
            f"{plural(d['start_urls_invalid'], 'refused start URL')}, "
            f"{plural(d['items_invalid'], 'invalid item')}, {plural(d['items_pending'], 'item')} pending",
            "  totals (estimates: every worker since the crawl began, less the last seconds of one killed): "
            + (", ".join(f"{k} {v}" for k, v in result["totals"].items()) or "none yet"),
            f"  busy hosts: {len(result['busy_hosts']) or 'none'}"
            + (
                " (in flight across the crawl, time between sends, last latency, held back by)"
                if result["busy_hosts"]
                else ""
            ),
        ]
        for h in result["busy_hosts"]:
            latency = f"{h['latency_s']:.3f}s" if h["latency_s"] is not None else "-"
            lines.append(
                f"    {h['host']}: {h['in_flight']} in flight, delay {h['delay_s']:.3f}s, latency {latency}, "
                f"held back by {', '.join(h['held_back_by']) or 'nothing'}"
            )
        r = result["revisits"]
        if r["scheduled"] or r["due"]:
            share = f"{100 * r['not_modified_share']:.0f}%" if r["not_modified_share"] is not None else "-"
            nxt = f", next due in {duration(r['next_due_in_s'])}" if r["next_due_in_s"] is not None else ""
            lines.append(
                f"  revisits: {r['scheduled']} scheduled, {r['due']} due now"
                + (f" (the oldest {duration(r['overdue_s'])} overdue)" if r["due"] else "")
                + f"{nxt}; answered 304: {share}"
            )
        lines.append(f"  workers: {len(result['workers'])}")
        for w in result["workers"]:
            metrics = f", metrics on {w['metrics']}" if w.get("metrics") else ""
            lines.append(
                f"    {w['node']}: {plural(w['pages'], 'page')} ({w['pages_per_min']}/min), "
                f"{plural(w['items'], 'item')}, "
                f"{plural(w['leases'], 'lease')}, last beat {w['last_beat_s']}s ago{metrics}"
            )
        return "\n".join(lines)


def progress(result: dict[str, Any]) -> str:
    """Pages done against pages known to be still to do, e.g. ``80 pages done, 16 to go (83%)``:
    done is the crawl's ``pages`` total (responses received by every worker since the crawl
    began, robots.txt included), to go what is queued, in flight or waiting as a start URL. The
    share grows and falls as parsed pages add links: it is not an estimate of the crawl's end."""
    f = result["frontier"]
    done = result["totals"].get("pages", result["pages"])
    to_go = f["queued"] + f["in_flight"] + f["start_urls_waiting"]
    share = f" ({100 * done // (done + to_go)}%)" if done + to_go else ""
    return f"{plural(done, 'page')} done, {to_go} to go{share}"
