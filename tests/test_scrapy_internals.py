"""The Scrapy internals scrapy-frontier relies on (scrapy_frontier/scrapy_internals.py) still
exist and behave as it expects: a Scrapy upgrade that changes them fails here, by name."""

from __future__ import annotations

import pytest
import scrapy
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from scrapy_frontier import scrapy_internals


class Spider(scrapy.Spider):
    name = "internals"


@pytest.fixture
def engine_crawler():
    crawler = get_crawler(Spider)
    crawler.spider = crawler._create_spider()
    crawler.engine = crawler._create_engine()
    return crawler


def test_after_scrape_wraps_the_scrapers_enqueue_scrape(engine_crawler):
    scraper = engine_crawler.engine.scraper
    fired: list[tuple] = []
    sentinel = Deferred()
    scraper.enqueue_scrape = lambda result, request: sentinel  # what the engine would await
    scrapy_internals.after_scrape(
        engine_crawler, lambda passthrough, result, request: fired.append((passthrough, result, request)) or passthrough
    )
    d = scraper.enqueue_scrape("response", "request")
    assert fired == []
    sentinel.callback("done")
    assert d is sentinel and fired == [("done", "response", "request")]


def test_enqueue_scrape_is_what_the_engine_calls_with_a_response():
    import inspect

    from scrapy.core import engine, scraper

    assert "enqueue_scrape" in inspect.getsource(engine.ExecutionEngine), (
        "scrapy_frontier.scrapy_internals.after_scrape: the engine no longer calls Scraper.enqueue_scrape"
    )
    params = list(inspect.signature(scraper.Scraper.enqueue_scrape).parameters)
    assert params[:3] == ["self", "result", "request"], (
        f"scrapy_frontier.scrapy_internals.after_scrape: Scraper.enqueue_scrape{params} changed"
    )


def test_after_scrape_fails_loudly_without_enqueue_scrape(engine_crawler):
    del engine_crawler.engine.scraper
    with pytest.raises(scrapy_internals.ScrapyChanged, match="scrapy_internals"):
        scrapy_internals.after_scrape(engine_crawler, lambda *a: None)


def test_after_downloader_request_calls_back_after_the_engine_handed_a_request_on(engine_crawler):
    engine = engine_crawler.engine
    handed: list = []
    engine._handle_downloader_output = lambda result, request: handed.append(("engine", result)) or "out"
    called: list = []
    scrapy_internals.after_downloader_request(engine_crawler, lambda child, parent: called.append((child, parent)))
    child, parent = scrapy.Request("http://a/2"), scrapy.Request("http://a/1")
    assert engine._handle_downloader_output(child, parent) == "out"
    assert engine._handle_downloader_output("a response", parent) == "out"
    assert handed == [("engine", child), ("engine", "a response")] and called == [(child, parent)]


def test_handle_downloader_output_crawls_a_request_result():
    import inspect

    from scrapy.core import engine

    source = inspect.getsource(engine.ExecutionEngine._handle_downloader_output)
    assert "self.crawl(result)" in source, (
        "scrapy_frontier.scrapy_internals.after_downloader_request: the engine no longer crawls a Request "
        "returned by the downloader in _handle_downloader_output"
    )


def test_after_downloader_request_fails_loudly_without_it(engine_crawler):
    engine_crawler.engine = object()
    with pytest.raises(scrapy_internals.ScrapyChanged, match="scrapy_internals"):
        scrapy_internals.after_downloader_request(engine_crawler, lambda *a: None)


def test_wake_engine_schedules_the_engines_next_call(engine_crawler):
    import inspect

    from scrapy.core.engine import _Slot
    from scrapy.utils.reactor import CallLaterOnce

    assert "nextcall" in inspect.signature(_Slot).parameters, (
        "scrapy_frontier.scrapy_internals.wake_engine: the engine's _Slot has no nextcall"
    )
    assert hasattr(CallLaterOnce, "schedule"), (
        "scrapy_frontier.scrapy_internals.wake_engine: CallLaterOnce.schedule is gone"
    )
    scheduled: list[int] = []
    engine_crawler.engine._slot = type(
        "Slot", (), {"nextcall": type("Next", (), {"schedule": lambda self: scheduled.append(1)})()}
    )()
    scrapy_internals.wake_engine(engine_crawler)
    assert scheduled == [1]
    engine_crawler.engine._slot = None
    scrapy_internals.wake_engine(engine_crawler)  # no slot (closing): nothing to wake, no error


def test_the_engine_slot_still_has_nextcall():
    import inspect

    from scrapy.core import engine

    source = inspect.getsource(engine)
    assert "self._slot" in source and "nextcall" in source, (
        "scrapy_frontier.scrapy_internals.wake_engine: ExecutionEngine._slot.nextcall is gone"
    )
