"""The base of the project's Redis commands: the spider argument (and the spider's own ``-a``
arguments, with which the spider is built as ``scrapy crawl`` builds it), ``--json`` output, a Redis
client from the project settings, and errors as one line on stderr with exit status 2. Output
goes through :func:`write_out`: a reader that stops early (``scrapy status site | head``) ends
the command quietly instead of with a ``BrokenPipeError``; output that cannot be written
(``> /dev/full``) is one error line, exit status 2."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import redis
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.utils.conf import arglist_to_dict

from scrapy_frontier.connection import (
    REDIS_FAILURES,
    ConfigError,
    describe_error,
    redact_url,
    redis_url,
    sync_redis,
)
from scrapy_frontier.keys import Keys, crawl_id_error
from scrapy_frontier.scrapy_compat import get_spider_loader

if TYPE_CHECKING:
    import argparse


class OutputClosed(Exception):
    """Standard output was closed by its reader (``| head``): the command stops, quietly."""


class OutputFailed(OutputClosed):
    """Standard output cannot be written (a full disk, ``> /dev/full``): the command stops with
    one error line (:meth:`RedisCommand.output_stopped`)."""


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def write_out(text: str) -> None:
    """Write ``text`` and a newline to standard output, flushed. Raises :class:`OutputClosed`
    when the reader has closed the pipe, :class:`OutputFailed` (its message the system's) when
    the write fails otherwise; either way after pointing standard output at ``/dev/null`` so that
    Python's flush at exit does not fail again (the recipe of the Python documentation, "Note on
    SIGPIPE" in :mod:`signal`)."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        raise OutputClosed from None
    except OSError as exc:
        _stdout_to_devnull()
        raise OutputFailed(exc.strerror or str(exc)) from None


def recorded_shards(client: Any, keys: Keys) -> int:
    """The crawl's recorded shard count; for a crawl not started yet, what its first worker will
    record: none on a single Redis, :data:`~scrapy_frontier.dupefilter.CLUSTER_SHARDS` on a
    cluster (``FRONTIER_SHARDS`` aside)."""
    from scrapy_frontier.connection import is_cluster
    from scrapy_frontier.dupefilter import CLUSTER_SHARDS

    stored = client.hget(keys.dupefilter_meta, "shards")
    if stored is not None:
        return int(stored)
    return CLUSTER_SHARDS if is_cluster(client) else 0


class RedisCommand(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}
    #: Whether the command needs the project to have the spider (``push`` checks payloads with
    #: it); the others act on any spider's keys, with a warning for a name the project lacks.
    needs_spider = False

    def syntax(self) -> str:
        return "[options] <spider>"

    #: The spider, built with its ``-a`` arguments (:meth:`build_spider`), when the
    #: project has it: a ``redis_key`` its ``__init__`` sets is the key the command uses.
    spider: Any = None

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
        parser.add_argument(
            "-a",
            dest="spargs",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="spider argument, as scrapy crawl takes it (may be repeated)",
        )

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        try:
            opts.spargs = arglist_to_dict(opts.spargs)
        except ValueError:
            raise UsageError("invalid -a value, use -a NAME=VALUE", print_help=False) from None

    def build_spider(self, spidercls: type, spargs: dict[str, str]) -> Any:
        """``spidercls`` made with the ``-a`` arguments, through its ``__init__`` as ``scrapy crawl``
        makes it (where a ``redis_key`` of the arguments is set), without what ``from_crawler``
        adds for a crawl (scrapy-redis's Redis connection, this project's start-URL checks).
        Raises ``Exception`` as the spider does."""
        return spidercls(**spargs)

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give exactly one spider name")
        assert self.settings is not None
        error = crawl_id_error(str(self.settings.get("CRAWL_ID") or "").strip())
        if error:
            return self._fail(error)
        loader = get_spider_loader(self.settings)
        spidercls = None
        if args[0] in loader.list():
            spidercls = loader.load(args[0])
        elif self.needs_spider:
            return self._fail(
                f"this project has no spider {args[0]!r} (its spiders: {', '.join(sorted(loader.list())) or 'none'})"
            )
        else:
            print(f"warning: this project has no spider {args[0]!r}; using its keys anyway", file=sys.stderr)
        spargs = getattr(opts, "spargs", None) or {}
        if spidercls is not None:
            try:
                self.spider = self.build_spider(spidercls, spargs)
            except Exception as exc:
                shown = " ".join(f"-a {name}={value}" for name, value in spargs.items())
                return self._fail(f"cannot make spider {args[0]!r}{' with ' + shown if shown else ''}: {exc}")
        try:
            client = sync_redis(self.settings)
            client.ping()
        except ConfigError as exc:
            return self._fail(str(exc))
        except REDIS_FAILURES as exc:
            return self._fail(f"REDIS_URL {redact_url(redis_url(self.settings))}: {describe_error(exc)}")
        try:
            keys = Keys.for_spider(self.settings, args[0], spidercls, redis_key=getattr(self.spider, "redis_key", None))
            keys = keys.with_shards(recorded_shards(client, keys))
            result = self.execute(client, keys, opts)
            if result is not None:  # None: execute() reported an error, or printed its own output
                self.emit(result, opts)
        except redis.exceptions.RedisError as exc:
            return self._fail(f"Redis error: {describe_error(exc)}")
        except OutputClosed as exc:
            return self.output_stopped(exc)
        finally:
            client.close()
        return None

    def emit(self, result: dict[str, Any], opts: argparse.Namespace) -> None:
        """Print ``result``: one JSON object with ``--json``, else :meth:`describe`'s text."""
        write_out(json.dumps(result, ensure_ascii=False) if opts.json else self.describe(result))

    def output_stopped(self, exc: OutputClosed) -> None:
        """End the command after :func:`write_out` stopped: quietly when the reader left, with one
        error line and exit status 2 when the output could not be written."""
        if isinstance(exc, OutputFailed):
            self._fail(f"cannot write the output: {exc}")

    def _fail(self, message: str) -> None:
        """Report a setup error: one line on stderr, exit status 2 (execute() then returns None)."""
        print(f"error: {message}", file=sys.stderr)
        self.exitcode = 2

    def push_start_urls(self, client: redis.Redis, keys: Keys, payloads: list[bytes]) -> None:
        """Add raw start-URL payloads to ``<spider>:start_urls`` as workers take them: LPUSH, or
        SADD with ``REDIS_START_URLS_AS_SET``."""
        assert self.settings is not None
        if not payloads:
            return
        if self.settings.getbool("REDIS_START_URLS_AS_SET"):
            client.sadd(keys.start_urls, *payloads)
        else:
            client.lpush(keys.start_urls, *payloads)

    def execute(self, client: redis.Redis, keys: Keys, opts: argparse.Namespace) -> dict[str, Any] | None:
        raise NotImplementedError

    def describe(self, result: dict[str, Any]) -> str:
        raise NotImplementedError
