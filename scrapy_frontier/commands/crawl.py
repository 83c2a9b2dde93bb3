"""``scrapy crawl``, exiting with status 2 when the crawl could not start because of a setting
(an unreachable or misconfigured ``REDIS_URL`` or ``MYSQL_URL``), so scripts and scrapyd see the
failure. The error itself is one log line that names the setting. Status 1 when the crawl's
state in Redis was lost (finish reason ``state_lost``) or the worker was stopped without closing
its spider (a second SIGINT or SIGTERM). A spider the project does not
have is one line on stderr that lists those it has (exit status 2), before Scrapy logs anything.

With ``LOG_JSON`` on, the JSON log handler (:mod:`scrapy_frontier.observability.logjson`) is installed here, before
Scrapy logs its first line, and learns the crawler's node id as soon as the crawler exists."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError

from scrapy_frontier.config import CONFIG_ERROR, STATE_LOST, failed_at_open
from scrapy_frontier.observability import logjson
from scrapy_frontier.scrapy_compat import get_spider_loader
from scrapy_frontier.scrapy_redis_settings import redis_key_problem

if TYPE_CHECKING:
    import argparse

    from scrapy.crawler import Crawler


class Command(ScrapyCrawlCommand):
    #: Crawlers made whose spider has not closed: one left when the run ends was stopped unclean.
    _unclosed = 0

    def __init__(self) -> None:
        super().__init__()
        #: The crawlers made: one a setting stopped, however it ended, exits with status 2.
        self._crawlers: list[Crawler] = []

    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        super().process_options(args, opts)
        assert self.settings is not None
        if len(args) == 1:
            # Scrapy would log its start-up lines and end in a traceback (KeyError: 'Spider not found')
            names = sorted(get_spider_loader(self.settings).list())
            if args[0] not in names:
                print(
                    f"error: this project has no spider {args[0]!r}; its spiders: {', '.join(names) or 'none'}",
                    file=sys.stderr,
                )
                raise SystemExit(2)
            # a RedisSpider's own setup_redis would end in a traceback before any component opens
            problem = redis_key_problem(get_spider_loader(self.settings).load(args[0]))
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                raise SystemExit(2)
        # LOG_JSON: the JSON handler must be in place before the CrawlerProcess logs its first line.
        try:
            logjson.install_early(self.settings, args[0] if args else None)
        except ValueError as exc:
            raise UsageError(str(exc), print_help=False) from None

    def _create_crawler(self, spidercls: Any) -> Crawler:
        crawler = super()._create_crawler(spidercls)
        self._unclosed += 1
        self._crawlers.append(crawler)
        logjson.set_crawler(crawler)
        crawler.signals.connect(self._on_closed, signal=signals.spider_closed)
        return crawler

    def _on_closed(self, spider: Any, reason: str) -> None:
        self._unclosed -= 1
        if reason == CONFIG_ERROR:
            self.exitcode = 2
        elif reason == STATE_LOST:
            self.exitcode = 1

    def run(self, args: list[str], opts: Any) -> None:
        exitcode = getattr(self, "exitcode", 0)
        super().run(args, opts)
        if any(failed_at_open(crawler) for crawler in self._crawlers):
            # a setting refused at start, even when the spider then failed to be made (a list
            # redis_key, which scrapy-redis's own setup_redis cannot expand)
            exitcode = 2
        elif self._unclosed > 0:
            # the reactor stopped with a spider still open: a second SIGINT or SIGTERM (Scrapy's
            # "forcing unclean shutdown"), whose leases are left for the other workers to reclaim
            exitcode = max(exitcode, 1)
        self.exitcode = max(self.exitcode, exitcode)
