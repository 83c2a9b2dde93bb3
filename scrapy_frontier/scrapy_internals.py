"""Every place scrapy-frontier reaches into Scrapy's internals, in one module.

Scrapy has no public API for these needs. Each function names the Scrapy version it was
checked against; ``tests/test_scrapy_internals.py`` fails loudly (with this module's name in
the message) when an upgrade of Scrapy changes what it relies on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler

#: The Scrapy version these hooks were last checked against.
CHECKED_WITH = "2.19.0"


class ScrapyChanged(RuntimeError):
    """A Scrapy internal this module relies on is gone: scrapy-frontier needs an update."""


def after_scrape(crawler: Crawler, callback: Callable[[Any, Any, Request], Any]) -> None:
    """Call ``callback(passthrough, result, request)`` when Scrapy is done with a response (or a
    download failure): its callback ran, the requests it yielded were handed to the scheduler and
    its items went through every item pipeline. ``result`` is the Response or the Failure.

    Scrapy has no signal for that moment; ``Scraper.enqueue_scrape(result, request)`` returns
    the Deferred that fires exactly then (Scrapy 2.11-2.19, ``scrapy/core/scraper.py``), so it is
    wrapped on this crawler's scraper instance. Raises :class:`ScrapyChanged` when it is gone.
    """
    scraper = getattr(crawler.engine, "scraper", None)
    enqueue_scrape = getattr(scraper, "enqueue_scrape", None)
    if scraper is None or enqueue_scrape is None:
        raise ScrapyChanged(
            "scrapy_frontier.scrapy_internals: ExecutionEngine.scraper.enqueue_scrape is gone (checked with Scrapy "
            f"{CHECKED_WITH})"
        )

    def wrapped(result: Any, request: Request, *args: Any) -> Any:
        # Scrapy < 2.13 passes the spider too
        d = enqueue_scrape(result, request, *args)
        d.addBoth(callback, result, request)
        return d

    scraper.enqueue_scrape = wrapped


def after_downloader_request(crawler: Crawler, callback: Callable[[Request, Request], Any]) -> None:
    """Call ``callback(child, parent)`` when a downloader middleware answered the download of
    ``parent`` with a new request ``child`` (a redirect, a retry, or a request of its own) and
    the engine has handed ``child`` on: to the scheduler, or to the ``request_scheduled`` signal
    handlers that may drop it (Scrapy's offsite filter drops a redirect to a host outside
    ``allowed_domains`` there, before the scheduler sees it). No signal says that ``parent`` is
    done then.

    ``ExecutionEngine._handle_downloader_output(result, request)`` calls ``self.crawl(result)``
    synchronously for a Request result (Scrapy 2.11-2.19, ``scrapy/core/engine.py``), so it is
    wrapped on this crawler's engine instance. Raises :class:`ScrapyChanged` when it is gone.
    """
    from scrapy import Request

    engine = crawler.engine
    handle = getattr(engine, "_handle_downloader_output", None)
    if handle is None:
        raise ScrapyChanged(
            "scrapy_frontier.scrapy_internals: ExecutionEngine._handle_downloader_output is gone (checked with "
            f"Scrapy {CHECKED_WITH})"
        )

    def wrapped(result: Any, request: Request) -> Any:
        out = handle(result, request)
        if isinstance(result, Request):
            callback(result, request)
        return out

    engine._handle_downloader_output = wrapped  # type: ignore[method-assign]


def wake_engine(crawler: Crawler) -> None:
    """Ask the engine to call the scheduler's ``next_request()`` now, rather than at its next
    5-second heartbeat: requests arrived from Redis. ``ExecutionEngine._slot.nextcall`` is a
    ``CallLaterOnce`` (Scrapy 2.11-2.19, ``scrapy/core/engine.py``). Does nothing while the
    engine has no slot (not yet open, or closing)."""
    # ``slot`` before Scrapy 2.13
    slot = getattr(crawler.engine, "_slot", None) or getattr(crawler.engine, "slot", None)
    if slot is not None:
        slot.nextcall.schedule()


def fail_the_run(crawler: Crawler) -> None:
    """Make Scrapy's own ``scrapy crawl`` (and ``runspider``) exit with status 1 once this crawl
    has ended; called from a ``spider_closed`` handler when a setting stopped the crawl at start
    or its state in Redis was lost.

    Scrapy has no public way for an extension to set the exit status. ``CrawlerRunner`` marks the
    run ``bootstrap_failed`` when a crawl ends without ``crawler.spider`` (Scrapy 2.11-2.19,
    ``scrapy/crawler.py``), and the commands exit with status 1 then; so ``crawler.spider`` is
    cleared once the ``spider_closed`` handlers have run (the engine passes the spider on as an
    argument from there)."""
    import asyncio

    def clear_spider() -> None:
        crawler.spider = None

    asyncio.get_event_loop().call_soon(clear_spider)


def keep_root_handler() -> None:
    """Keep Scrapy's current root log handler (made JSON by the add-on) for the rest of the run.

    ``Crawler._update_root_log_handler`` replaces the handler that
    ``scrapy.utils.log.get_scrapy_root_handler()`` returns with a new plain one once the crawler's
    settings are final (Scrapy 2.11-2.19, ``scrapy/crawler.py``), and does nothing when there is
    none; so the handler stays on the root logger and Scrapy forgets it."""
    import scrapy.utils.log

    scrapy.utils.log._scrapy_root_handler = None
