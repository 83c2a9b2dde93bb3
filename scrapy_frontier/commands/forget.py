"""``scrapy forget <spider> URL... [--pattern GLOB] [--push]``: let URLs through the shared
dupefilter again, so the crawl fetches them once more when they are found or pushed."""

from __future__ import annotations

import fnmatch
import json
import sys
from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import UsageError
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object

from scrapy_frontier.adopt import crawl_fingerprinter
from scrapy_frontier.config import read_value
from scrapy_frontier.connection import text
from scrapy_frontier.dupefilter import (
    DedupConfig,
    Dupefilter,
    DupefilterMismatch,
    check_meta,
    meta_for,
    stored_layout,
)
from scrapy_frontier.keys import queue_host
from scrapy_frontier.redis_command import RedisCommand
from scrapy_frontier.revisit import supersede
from scrapy_frontier.scrapy_compat import build_from_crawler, get_spider_loader
from scrapy_frontier.serialize import RequestRefused, parse_start_payload
from scrapy_frontier.wording import payload_text, plural, shown_payload

if TYPE_CHECKING:
    import argparse

    import redis

    from scrapy_frontier.keys import Keys


def glob_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a shell-style pattern :mod:`fnmatch` reads as meant, or ``None``:
    an empty one, a ``[`` without its ``]`` (fnmatch then matches a literal ``[``, so the
    pattern silently matches nothing) or an empty range (``[z-a]``). The rules are fnmatch's
    (``translate``): ``[!...]`` negates, a ``]`` right after ``[`` or ``[!`` is literal."""
    if not pattern:
        return "it is empty"
    i, n = 0, len(pattern)
    while i < n:
        c, i = pattern[i], i + 1
        if c != "[":
            continue
        j = i + (i < n and pattern[i] == "!")
        j += j < n and pattern[j] == "]"
        j = pattern.find("]", j)
        if j < 0:
            return f"the '[' at position {i - 1} has no closing ']' (a literal '[' is written [[])"
        body = pattern[i:j].removeprefix("!")
        for k in range(1, len(body) - 1):
            if body[k] == "-" and body[k - 1] > body[k + 1]:
                return f"the range {body[k - 1]}-{body[k + 1]} is empty"
        i = j + 1
    return None


def crawl_request_fingerprinter(settings: Any, spidercls: type[Spider], stored: dict[str, str]) -> Any:
    """The request fingerprinter the crawl's workers use: the project's
    ``REQUEST_FINGERPRINTER_CLASS``, or the one ``stored`` (the dupefilter's meta) records
    (:func:`~scrapy_frontier.adopt.crawl_fingerprinter`)."""
    crawler = Crawler(spidercls, settings)
    return crawl_fingerprinter(
        stored, build_from_crawler(load_object(settings["REQUEST_FINGERPRINTER_CLASS"]), crawler)
    )


class Command(RedisCommand):
    def syntax(self) -> str:
        return "[options] <spider> [URL or JSON payload ...]"

    def short_desc(self) -> str:
        return "Remove URLs from the shared dupefilter so that they are crawled again"

    def long_desc(self) -> str:
        return (
            "Each URL (or start-URL JSON payload, for a POST or a body) is fingerprinted with the project's "
            "request fingerprinter and let through the dupefilter once more. --pattern also forgets every URL "
            "of a stored item (the Redis item cache) that matches a shell-style pattern. --push queues them "
            "at once (as start URLs); otherwise they are fetched when a page links to them again. A URL in the "
            "revisit schedule (REVISIT_INTERVAL) leaves it."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--pattern",
            metavar="GLOB",
            action="append",
            default=[],
            help="forget the stored items' URLs matching GLOB (fnmatch), e.g. 'https://example.com/news/*'",
        )
        parser.add_argument("--push", action="store_true", help="also push the forgotten URLs to <spider>:start_urls")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args:
            raise UsageError("give a spider name, then URLs (or --pattern)")
        self._payloads = [a.encode("utf-8", "surrogateescape") for a in args[1:]]
        if not self._payloads and not opts.pattern:
            raise UsageError("no URL or --pattern given")
        for pattern in opts.pattern:
            problem = glob_problem(pattern)
            if problem:
                self._fail(f"--pattern {pattern!r} is malformed: {problem}")
                return None
        super().run(args[:1], opts)
        if self.exitcode == 0 and self._refused:
            self.exitcode = 1

    def execute(self, client: redis.Redis, keys: Keys, opts: argparse.Namespace) -> dict[str, Any] | None:
        assert self.settings is not None
        try:
            spidercls = get_spider_loader(self.settings).load(keys.spider)
        except KeyError:
            spidercls = Spider
        layout = stored_layout(client, keys)
        if layout is None:
            self._fail(f"the dupefilter {keys.dupefilter} is empty: nothing to forget")
            return None
        stored = {text(k): text(v) for k, v in client.hgetall(keys.dupefilter_meta).items()}
        fingerprinter = crawl_request_fingerprinter(self.settings, spidercls, stored)
        config = DedupConfig.for_layout(layout).for_stored(stored)
        wanted = meta_for(config, fingerprinter)
        try:
            check_meta(stored, wanted, keys.dupefilter)
        except DupefilterMismatch as exc:
            self._fail(str(exc))
            return None
        spider = spidercls() if spidercls is not Spider else Spider(name=keys.spider)
        try:
            max_bytes = read_value(self.settings, "REDIS_START_URLS_MAX_BYTES")
            encoding = read_value(self.settings, "REDIS_ENCODING")
        except ValueError as exc:
            self._fail(str(exc))
            return None
        payloads = list(self._payloads)
        for pattern in opts.pattern:
            payloads += [url.encode() for url in self._stored_urls(client, keys) if fnmatch.fnmatchcase(url, pattern)]
        fingerprints: dict[str, bytes] = {}
        shard_of: dict[str, int] = {}
        self._refused, self._shown = [], []
        for raw in payloads:
            try:
                request, _ = parse_start_payload(raw, spider, max_bytes, encoding)
            except RequestRefused as exc:
                self._refused.append({"payload": payload_text(raw), "reason": exc.reason, "detail": str(exc)})
                self._shown.append(shown_payload(raw))
                continue
            fingerprints.setdefault(fingerprinter.fingerprint(request).hex(), raw)
            shard_of.setdefault(
                fingerprinter.fingerprint(request).hex(),
                keys.shard_of(queue_host(urlparse_cached(request).hostname)).index,
            )
        known = 0
        if fingerprints:
            dupefilter = Dupefilter(client, keys, config)
            for shard in sorted(set(shard_of.values())):
                known += int(dupefilter.forget([fp for fp in fingerprints if shard_of[fp] == shard], shard))
            by_shard: dict[int, list[str]] = {}
            for fp, shard in shard_of.items():
                by_shard.setdefault(shard, []).append(fp)
            supersede(client, keys, by_shard)
            # running workers empty their local first look at their next heartbeat
            client.incr(keys.forgets)
            if opts.push:
                self.push_start_urls(client, keys, list(fingerprints.values()))
        return {
            "forgotten": len(fingerprints),
            "known": known if layout != "bloom" else None,
            "layout": layout,
            "pushed": len(fingerprints) if opts.push else 0,
            "urls": [raw.decode("utf-8", "backslashreplace") for raw in fingerprints.values()],
            "refused": self._refused,
        }

    def _stored_urls(self, client: redis.Redis, keys: Keys) -> list[str]:
        """The ``url`` of every item in the Redis item cache (``<spider>:items:cache:*``)."""
        urls = []
        cache_keys = list(client.scan_iter(match=keys.item_cache_match, count=1000))
        with client.pipeline(transaction=False) as pipe:
            for key in cache_keys:
                pipe.hget(key, "item")
            for raw in pipe.execute():
                try:
                    url = json.loads(raw).get("url") if raw else None
                except (ValueError, AttributeError):
                    continue
                if isinstance(url, str):
                    urls.append(url)
        if not cache_keys:
            print(f"warning: no item in the cache {keys.item_cache_match}: --pattern matches nothing", file=sys.stderr)
        elif not urls:
            print(
                "warning: the cache keeps no items (the crawl ran with REDIS_CACHE_ITEMS off): --pattern matches "
                "nothing",
                file=sys.stderr,
            )
        return urls

    def describe(self, result: dict[str, Any]) -> str:
        lines = [f"refused {shown} ({r['reason']}): {r['detail']}" for shown, r in zip(self._shown, result["refused"])]
        known = (
            "" if result["known"] is None else f" ({result['known']} {'was' if result['known'] == 1 else 'were'} in it)"
        )
        lines.append(
            f"forgot {plural(result['forgotten'], 'URL')} in the {result['layout']} dupefilter{known}; pushed "
            f"{result['pushed']}"
        )
        return "\n".join(lines)
