"""``scrapy push <spider> URL_OR_JSON... [--file F] [--now]``: check start-URL payloads, then push
them; with ``--now``, pushed to be fetched even if seen, each page's record in the revisit
schedule superseded: fetched now, the page is scheduled again from that fetch."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import UsageError
from scrapy.utils.httpobj import urlparse_cached

from scrapy_frontier.commands.forget import crawl_request_fingerprinter
from scrapy_frontier.config import read_value
from scrapy_frontier.connection import text
from scrapy_frontier.keys import queue_host
from scrapy_frontier.redis_command import RedisCommand
from scrapy_frontier.revisit import supersede
from scrapy_frontier.scrapy_compat import get_spider_loader
from scrapy_frontier.serialize import RequestRefused, parse_start_payload
from scrapy_frontier.wording import payload_text, plural, shown_payload

if TYPE_CHECKING:
    import argparse

    import redis

    from scrapy_frontier.keys import Keys


class Command(RedisCommand):
    needs_spider = True

    def syntax(self) -> str:
        return "[options] <spider> [URL or JSON payload ...]"

    def short_desc(self) -> str:
        return "Check start-URL payloads as a worker would, and push the good ones to <spider>:start_urls"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--file", metavar="FILE", help="read payloads from FILE, one per line ('-': standard input)"
        )
        parser.add_argument(
            "--now",
            action="store_true",
            help="fetch each URL now even if seen (dont_filter); a page in the revisit schedule "
            "(REVISIT_INTERVAL) is scheduled again from that fetch, its interval from REVISIT_INTERVAL",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if not args:
            raise UsageError("give a spider name, then payloads (or --file)")
        self._payloads = [a.encode("utf-8", "surrogateescape") for a in args[1:]]
        if opts.file:
            try:
                stream = sys.stdin.buffer if opts.file == "-" else open(opts.file, "rb")  # noqa: SIM115
                with stream:
                    self._payloads += [line.rstrip(b"\r\n") for line in stream if line.strip()]
            except OSError as exc:
                self._fail(f"--file {opts.file}: {exc.strerror or exc}")
                return None
        if not self._payloads:
            raise UsageError("no payload given")
        super().run(args[:1], opts)
        if self.exitcode == 0 and self._refused:
            self.exitcode = 1

    def execute(self, client: redis.Redis, keys: Keys, opts: argparse.Namespace) -> dict[str, Any] | None:
        assert self.settings is not None
        spider = self.spider  # built with the -a arguments (needs_spider: the project has it)
        try:
            max_bytes = read_value(self.settings, "REDIS_START_URLS_MAX_BYTES")
            encoding = read_value(self.settings, "REDIS_ENCODING")
        except ValueError as exc:
            self._fail(str(exc))
            return None
        good: list[bytes] = []
        requests = []
        self._refused, self._shown = [], []
        for raw in self._payloads:
            try:
                request, unknown = parse_start_payload(raw, spider, max_bytes, encoding)
            except RequestRefused as exc:
                self._refused.append({"payload": payload_text(raw), "reason": exc.reason, "detail": str(exc)})
                self._shown.append(shown_payload(raw))
                continue
            good.append(raw)
            requests.append(request)
            if unknown:
                print(
                    f"warning: {request.url}: unknown keys {', '.join(map(repr, unknown))} will be ignored",
                    file=sys.stderr,
                )
        now = 0
        if opts.now and good:
            now = self._supersede(client, keys, requests)
            good = [_dont_filter(raw, request) for raw, request in zip(good, requests)]
        self.push_start_urls(client, keys, good)
        return {"pushed": len(good), "now": len(good) if opts.now else 0, "superseded": now, "refused": self._refused}

    def _supersede(self, client: redis.Redis, keys: Keys, requests: list[Any]) -> int:
        """Supersede the revisit-schedule records of ``requests`` (:func:`supersede`); how many."""
        assert self.settings is not None
        stored = {text(k): text(v) for k, v in client.hgetall(keys.dupefilter_meta).items()}
        if not stored:
            return 0  # no crawl yet: nothing scheduled
        spidercls = get_spider_loader(self.settings).load(keys.spider)
        fingerprinter = crawl_request_fingerprinter(self.settings, spidercls, stored)
        by_shard: dict[int, list[str]] = {}
        for request in requests:
            fp = fingerprinter.fingerprint(request).hex()
            by_shard.setdefault(keys.shard_of(queue_host(urlparse_cached(request).hostname)).index, []).append(fp)
        return supersede(client, keys, by_shard)

    def describe(self, result: dict[str, Any]) -> str:
        lines = [f"refused {shown} ({r['reason']}): {r['detail']}" for shown, r in zip(self._shown, result["refused"])]
        lines.append(
            f"pushed {plural(result['pushed'], 'payload')}, refused {len(result['refused'])}"
            + (f"; {result['now']} to fetch now, even if seen" if result["now"] else "")
        )
        return "\n".join(lines)


def _dont_filter(raw: bytes, request: Any) -> bytes:
    """A start-URL payload that the dupefilter lets through: its JSON object with ``dont_filter``
    true (a plain URL's: ``{"url": ..., "dont_filter": true}``)."""
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        payload = {"url": request.url}
    payload["dont_filter"] = True
    return json.dumps(payload).encode()
