"""Every difference between the Scrapy versions scrapy-frontier supports (2.11 to 2.19), in one place.

Each shim detects the feature, not the version number, and names the Scrapy version that made it
necessary and the one that lets it go (the oldest supported Scrapy having the feature).
``tests/test_scrapy_versions.py`` runs the core of the suite on the oldest and the newest Scrapy;
``tests/run.sh --scrapy-matrix`` on every minor between.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import TYPE_CHECKING, Any, TypeVar

import scrapy
from scrapy.utils.misc import load_object
from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

__all__ = [
    "AWAITS_PIPELINE_COROUTINES",
    "DOWNLOAD_CANCELLED",
    "SCRAPY_VERSION",
    "STARTS_FROM_START_REQUESTS",
    "CLOSES_AT_OPEN",
    "build_from_crawler",
    "close_when_opened",
    "close_spider",
    "download",
    "get_item_pipeline",
    "get_spider_loader",
    "pipeline_hook",
    "robots_parser",
    "run_in_thread",
    "send_signal",
    "set_in_component_priority_dict",
    "spider_required",
]

_T = TypeVar("_T")

#: The running Scrapy's version, as ``(major, minor)``.
SCRAPY_VERSION: tuple[int, int] = tuple(int(part) for part in scrapy.__version__.split(".")[:2])  # type: ignore[assignment]

#: Whether Scrapy itself calls a spider's ``start_requests()`` when the spider has no ``start()``
#: of its own: 2.11 to 2.15 do (2.13 to 2.15 from ``Spider.start()``); 2.16 removed
#: ``Spider.start_requests`` and calls ``start()`` alone.
STARTS_FROM_START_REQUESTS: bool = hasattr(scrapy.Spider, "start_requests")


def get_spider_loader(settings: BaseSettings) -> Any:
    """The project's spider loader (``SPIDER_LOADER_CLASS``). Scrapy 2.14 added
    ``scrapy.spiderloader.get_spider_loader``; before, commands built it the same way."""
    try:
        from scrapy.spiderloader import get_spider_loader as scrapys
    except ImportError:  # Scrapy < 2.14
        return load_object(settings["SPIDER_LOADER_CLASS"]).from_settings(settings.frozencopy())
    return scrapys(settings)


def build_from_crawler(objcls: Any, crawler: Crawler, /, *args: Any, **kwargs: Any) -> Any:
    """``objcls`` made through its ``from_crawler`` (or its constructor). Scrapy 2.12 added
    ``scrapy.utils.misc.build_from_crawler``; 2.11 has ``create_instance``."""
    try:
        from scrapy.utils.misc import build_from_crawler as scrapys
    except ImportError:  # Scrapy < 2.12
        from scrapy.utils import misc

        return getattr(misc, "create_instance")(objcls, None, crawler, *args, **kwargs)  # noqa: B009
    return scrapys(objcls, crawler, *args, **kwargs)


async def run_in_thread(func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``func(*args, **kwargs)`` in a thread, awaited on the reactor's asyncio loop (scrapy-frontier
    runs only under Scrapy's asyncio reactor). Scrapy 2.15's ``scrapy.utils.asyncio.run_in_thread``
    does the same; this one is for Scrapy < 2.15."""
    return await asyncio.to_thread(func, *args, **kwargs)


def _download_cancelled() -> tuple[type[BaseException], ...]:
    try:
        from scrapy.exceptions import DownloadCancelledError
    except ImportError:  # Scrapy < 2.15: the HTTP handler cancels with Twisted's CancelledError
        from twisted.internet.defer import CancelledError

        return (CancelledError,)
    return (DownloadCancelledError,)


#: The exceptions Scrapy's HTTP handler fails a download with when its body is over
#: ``DOWNLOAD_MAXSIZE``: ``DownloadCancelledError`` from Scrapy 2.15, Twisted's ``CancelledError`` before.
DOWNLOAD_CANCELLED: tuple[type[BaseException], ...] = _download_cancelled()


async def download(crawler: Crawler, request: Request) -> Response:
    """``request`` downloaded by the engine, through the downloader middlewares and outside the
    scheduler. Scrapy 2.14 added ``ExecutionEngine.download_async`` (and deprecated ``download``)."""
    engine = crawler.engine
    assert engine is not None
    if hasattr(engine, "download_async"):
        return await engine.download_async(request)
    deferred: Deferred[Response] = engine.download(request)
    return await deferred.asFuture(asyncio.get_running_loop())


async def close_spider(crawler: Crawler, reason: str) -> None:
    """Close the crawler's spider with ``reason``. Scrapy 2.14 added
    ``ExecutionEngine.close_spider_async`` (and deprecated ``close_spider(spider, reason)``)."""
    engine = crawler.engine
    assert engine is not None
    if hasattr(engine, "close_spider_async"):
        await engine.close_spider_async(reason=reason)
        return
    await engine.close_spider(crawler.spider, reason).asFuture(asyncio.get_running_loop())  # type: ignore[arg-type]


def set_in_component_priority_dict(settings: BaseSettings, name: str, cls: type, priority: int | None) -> None:
    """Put ``cls`` in the component priority dictionary ``name`` at ``priority`` (``None``: disabled),
    dropping import-string keys of the same class, without changing the setting's priority.
    Scrapy 2.12 added ``BaseSettings.set_in_component_priority_dict``; this is its code, for 2.11."""
    if hasattr(settings, "set_in_component_priority_dict"):
        settings.set_in_component_priority_dict(name, cls, priority)
        return
    components = settings.getdict(name)
    for key in tuple(components):
        if isinstance(key, str) and load_object(key) == cls:
            del components[key]
    components[cls] = priority
    settings.set(name, components, settings.getpriority(name) or 0)


def _awaits_pipeline_coroutines() -> bool:
    from scrapy.pipelines import ItemPipelineManager

    return hasattr(ItemPipelineManager, "open_spider_async")


#: Whether Scrapy awaits an item pipeline's ``async def open_spider`` / ``close_spider``: from 2.14
#: (which deprecates a Deferred there); 2.11 to 2.13 take a Deferred and pass the spider.
AWAITS_PIPELINE_COROUTINES: bool = _awaits_pipeline_coroutines()

_Method = TypeVar("_Method", bound="Callable[..., Coroutine[Any, Any, None]]")


def pipeline_hook(method: _Method) -> _Method:
    """Decorate an item pipeline's ``async def open_spider(self)`` or ``close_spider(self)``: as it
    is from Scrapy 2.14; before, a method taking the spider and returning a Deferred."""
    if AWAITS_PIPELINE_COROUTINES:
        return method

    @functools.wraps(method)
    def returning_deferred(self: Any, spider: Any = None) -> Any:
        from scrapy.utils.defer import deferred_from_coro

        return deferred_from_coro(method(self))

    return returning_deferred  # type: ignore[return-value]


def get_item_pipeline(crawler: Crawler, cls: type[_T]) -> _T | None:
    """The crawler's item pipeline of class ``cls`` (or a subclass), or ``None``; raises
    ``RuntimeError`` before the engine exists. Scrapy 2.12 added ``Crawler.get_item_pipeline``."""
    if hasattr(crawler, "get_item_pipeline"):
        return crawler.get_item_pipeline(cls)
    if crawler.engine is None:
        raise RuntimeError("get_item_pipeline() can only be called after the crawl engine has been created")
    for pipeline in crawler.engine.scraper.itemproc.middlewares:
        if isinstance(pipeline, cls):
            return pipeline
    return None


def spider_required(method: Callable[..., Any], crawler: Crawler) -> Callable[..., Any]:
    """``method`` of a Scrapy component, given the crawler's spider when it requires one (its
    ``spider`` parameter has no default): Scrapy 2.14 dropped the spider from component methods,
    one release at a time, and warns when it is passed where it has become optional."""
    if not _requires_spider(getattr(method, "__func__", method)):
        return method
    return functools.partial(method, spider=crawler.spider)


@functools.cache
def _requires_spider(function: Callable[..., Any]) -> bool:
    """Whether ``function`` has a ``spider`` parameter without a default (looked up once a function:
    the cookies middleware asks for every request)."""
    parameter = inspect.signature(function).parameters.get("spider")
    return parameter is not None and parameter.default is inspect.Parameter.empty


async def robots_parser(middleware: Any, request: Request) -> Any:
    """Scrapy's ``RobotsTxtMiddleware.robot_parser`` on ``middleware`` (a subclass): a coroutine
    from Scrapy 2.14; a Deferred or a parser, given the spider, before."""
    from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware

    if _requires_spider(RobotsTxtMiddleware.robot_parser):
        result = RobotsTxtMiddleware.robot_parser(middleware, request, middleware.crawler.spider)  # type: ignore[call-arg]
    else:
        result = RobotsTxtMiddleware.robot_parser(middleware, request)
    if isinstance(result, Deferred):
        return await result.asFuture(asyncio.get_running_loop())
    if inspect.isawaitable(result):
        return await result
    return result


async def send_signal(crawler: Crawler, signal: object, **kwargs: Any) -> None:
    """Send ``signal`` to its handlers, awaiting those that return a Deferred or a coroutine, and
    log what they raise. Scrapy 2.14 added ``SignalManager.send_catch_log_async``; before,
    ``send_catch_log_deferred`` does the same and returns a Deferred."""
    signals = crawler.signals
    if hasattr(signals, "send_catch_log_async"):
        await signals.send_catch_log_async(signal, **kwargs)
        return
    await signals.send_catch_log_deferred(signal, **kwargs).asFuture(asyncio.get_running_loop())


def _closes_at_open() -> bool:
    from scrapy.core.engine import ExecutionEngine

    opening = getattr(ExecutionEngine, "open_spider_async", None)
    return opening is not None and "CloseSpider" in inspect.getsource(opening)


#: Whether the engine closes the spider when a ``spider_opened`` handler raises ``CloseSpider``:
#: from Scrapy 2.18; before, it logs the exception and crawls on.
CLOSES_AT_OPEN: bool = _closes_at_open()


def close_when_opened(crawler: Crawler, reason: str) -> None:
    """Close the crawler's spider with ``reason`` as soon as it has opened (every component open):
    ``CloseSpider`` from ``spider_opened`` from Scrapy 2.18; before, ``CloseSpider`` from the
    first ``spider_idle`` (the start middleware yields no start request for such a crawl, so the
    engine is idle at once), after unhooking a scrapy-redis spider's own idle handler, which
    would keep it open. A close of the engine right after it started cancels Scrapy 2.13's start
    request processing with a traceback."""
    from scrapy import signals
    from scrapy.exceptions import CloseSpider

    def close_now(spider: Any) -> None:
        if CLOSES_AT_OPEN:
            raise CloseSpider(reason)
        idle = getattr(spider, "spider_idle", None)
        if idle is not None:
            crawler.signals.disconnect(idle, signals.spider_idle)
        crawler.signals.connect(close_when_idle, signals.spider_idle, weak=False)

    def close_when_idle(spider: Any) -> None:
        raise CloseSpider(reason)

    crawler.signals.connect(close_now, signals.spider_opened, weak=False)
