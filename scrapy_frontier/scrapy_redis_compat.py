"""scrapy-redis compatibility: which spiders read start URLs from Redis (:func:`waits_for_start_urls`),
the scrapy-redis spider attributes read from the spider at open (:func:`spider_options`), the
spider methods the frontier does not call (:func:`unused_methods`), scrapy-redis's scheduler
settings mapped onto the frontier (:func:`queue_order`), and what the scheduler does to a spider
when it opens (:func:`take_over`). The table of what each one does here: docs/spiders.md,
"scrapy-redis spider attributes"."""

from __future__ import annotations

import codecs
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import signals

from scrapy_frontier.keys import START_URLS_KEY

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

try:
    from scrapy_redis.spiders import RedisMixin as _RedisMixin  # type: ignore[import-untyped]
except ImportError:  # scrapy-redis is not installed: no spider is one of its
    _RedisMixin = None

_UNDER_LEASE = "start URLs are taken by the frontier under lease; put per-payload logic in make_request_from_data"
#: scrapy-redis spider methods the frontier never calls, and what to do instead.
UNUSED_METHODS = {
    "next_requests": _UNDER_LEASE,
    "schedule_next_requests": _UNDER_LEASE,
    "spider_idle": "the frontier's idle check closes the worker (max_idle_time, MAX_IDLE_TIME_BEFORE_CLOSE)",
    "setup_redis": "scrapy-redis's from_crawler still calls it, but the connection and idle handler it sets up are "
    "not used: " + _UNDER_LEASE,
    "make_requests_from_url": _UNDER_LEASE,
}

#: SCHEDULER_QUEUE_CLASS values (scrapy-redis's queues) -> the frontier's order they map to.
QUEUE_CLASSES = {
    "scrapy_redis.queue.PriorityQueue": "priority",
    "scrapy_redis.queue.SpiderPriorityQueue": "priority",
    "scrapy_redis.queue.FifoQueue": "fifo",
    "scrapy_redis.queue.SpiderQueue": "fifo",
    "scrapy_redis.queue.LifoQueue": "lifo",
    "scrapy_redis.queue.SpiderStack": "lifo",
}

#: Seconds the whole crawl must have been seen dry, at two idle checks, before a worker of a spider
#: that does not wait for start URLs closes, when SCHEDULER_IDLE_BEFORE_CLOSE is 0.
DRY_CONFIRM = 1.0


def is_redis_spider(spider: object) -> bool:
    """Whether ``spider`` is a scrapy-redis spider (``RedisSpider``, ``RedisCrawlSpider``, any
    ``RedisMixin`` subclass); ``False`` when scrapy-redis is not installed."""
    return _RedisMixin is not None and isinstance(spider, _RedisMixin)


def waits_for_start_urls(spider: object) -> bool:
    """Whether ``spider`` reads start URLs pushed to Redis, and so keeps waiting for more when the
    crawl has run dry (until ``max_idle_time`` / ``MAX_IDLE_TIME_BEFORE_CLOSE``): a scrapy-redis
    spider, or a spider whose class sets ``waits_for_start_urls = True`` (this project's ``site``
    and ``modules``). Any other spider's workers close once the whole crawl is dry, as one Scrapy
    process would."""
    return is_redis_spider(spider) or getattr(spider, "waits_for_start_urls", False) is True


def close_after(idle_close: float, idle_before_close: float, waits: bool) -> float:
    """Seconds the whole crawl must have been idle before a worker closes, 0 for never:
    ``idle_close`` (``max_idle_time`` / ``MAX_IDLE_TIME_BEFORE_CLOSE``) when set; else never for a
    spider that ``waits`` for start URLs, and ``idle_before_close`` (``SCHEDULER_IDLE_BEFORE_CLOSE``)
    or at least :data:`DRY_CONFIRM` for one that does not."""
    if idle_close > 0:
        return idle_close
    return 0.0 if waits else max(idle_before_close, DRY_CONFIRM)


@dataclass(frozen=True)
class SpiderOptions:
    """A spider's own scrapy-redis attributes, ``None`` where it has none (the settings apply):
    ``redis_key`` (a key template, ``%(name)s`` expanded to the crawl's name), ``redis_batch_size``
    (start URLs per call), ``redis_encoding`` (of the payloads), ``max_idle_time`` (seconds)."""

    redis_key: str | None = None
    batch_size: int | None = None
    encoding: str | None = None
    max_idle_time: float | None = None


def _expand(template: str, name: str) -> str | None:
    try:
        return template % {"name": name}
    except (TypeError, ValueError, KeyError):
        return None


def _own(spider: object, attribute: str, derived: Any) -> Any:
    """The spider instance's ``attribute``, or ``None`` when it is unset or is what scrapy-redis's
    ``setup_redis`` wrote from the settings (``derived``) while the class has none of its own."""
    value = getattr(spider, attribute, None)
    if value is None:
        return None
    if getattr(type(spider), attribute, None) is None and is_redis_spider(spider) and value == derived:
        return None
    return value


def spider_options(spider: Spider, settings: BaseSettings) -> SpiderOptions:
    """The scrapy-redis attributes of ``spider``, read from the instance (a value set in
    ``__init__`` counts) once the spider is made. Raises ``ValueError`` with a one-line message
    for a value the frontier cannot use: a ``redis_key`` that is a list (several keys) or empty,
    a ``redis_batch_size`` below 1, an unknown ``redis_encoding``, a negative ``max_idle_time``."""
    name = spider.name
    cls = type(spider).__name__
    key = getattr(spider, "redis_key", None)
    if isinstance(getattr(type(spider), "redis_key", None), (list, tuple)):
        key = None  # the add-on refused a class's list of keys already (scrapy_redis_settings)
    if key is not None:
        if not isinstance(key, str):
            raise ValueError(
                f"{cls}.redis_key={key!r}: one key is supported, a {type(key).__name__} of keys is not; push every "
                'start URL to one key (the frontier orders requests by priority: a JSON payload\'s "priority")'
            )
        if not key.strip():
            raise ValueError(f"{cls}.redis_key is empty: name the start-URL key, or remove the attribute")
        class_key = getattr(type(spider), "redis_key", None)
        default = settings.get("REDIS_START_URLS_KEY") or START_URLS_KEY
        if isinstance(class_key, str) and key in (class_key, _expand(class_key, name)):
            key = class_key  # the class's template: %(name)s takes the CRAWL_ID too
        elif class_key is None and is_redis_spider(spider) and key == _expand(default, name):
            key = None  # setup_redis's copy of REDIS_START_URLS_KEY
    batch = raw_batch = _own(spider, "redis_batch_size", settings.getint("CONCURRENT_REQUESTS"))
    if batch is not None:
        try:
            batch = int(batch)
        except (TypeError, ValueError):
            batch = 0
        if batch < 1:
            raise ValueError(f"{cls}.redis_batch_size={raw_batch!r} must be an integer >= 1")
    # REDIS_ENCODING itself is checked with the settings: only a spider's own value here
    encoding = _own(spider, "redis_encoding", settings.get("REDIS_ENCODING") or "utf-8")
    if encoding is not None:
        try:
            codecs.lookup(encoding)
        except (LookupError, TypeError):
            raise ValueError(f"{cls}.redis_encoding={encoding!r} is not a known encoding") from None
    max_idle = raw_idle = _own(spider, "max_idle_time", _int_or_none(settings.get("MAX_IDLE_TIME_BEFORE_CLOSE")))
    if max_idle is not None:
        try:
            max_idle = float(max_idle)
        except (TypeError, ValueError):
            max_idle = -1.0
        if not max_idle >= 0:
            raise ValueError(f"{cls}.max_idle_time={raw_idle!r} must be a number >= 0")
    return SpiderOptions(key, batch, encoding, max_idle)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(float(value or 0))
    except (TypeError, ValueError):
        return None


def unused_methods(spider: object) -> list[tuple[str, str]]:
    """The scrapy-redis methods a scrapy-redis spider's own classes define that the frontier does
    not call (:data:`UNUSED_METHODS`), with what to do instead; empty for any other spider."""
    if not is_redis_spider(spider):
        return []
    found = []
    for method, advice in UNUSED_METHODS.items():
        for klass in type(spider).__mro__:
            if method in vars(klass):
                if not klass.__module__.startswith(("scrapy_redis.", "scrapy.")):
                    found.append((f"{klass.__name__}.{method}", advice))
                break
    return found


def queue_order(value: Any) -> str:
    """The frontier order for scrapy-redis's ``SCHEDULER_QUEUE_CLASS`` (a class path or a class;
    unset: scrapy-redis's default, ``PriorityQueue``): ``"priority"``, ``"fifo"`` (the same order,
    said in one line) or ``"lifo"`` (each host's newest requests first: ``lua/lib/frontier_queue_lifo.lua``)
    (:data:`QUEUE_CLASSES`). Raises ``ValueError`` with a one-line message for any other class."""
    if value is None or value == "":
        return "priority"
    path = value if isinstance(value, str) else f"{value.__module__}.{value.__qualname__}"
    order = QUEUE_CLASSES.get(path.strip())
    if order is None:
        raise ValueError(
            f"SCHEDULER_QUEUE_CLASS={path!r} is not supported: the frontier keeps one queue per host, served by "
            "priority then first in, first out; remove the setting, or set one of scrapy-redis's queues "
            f"({', '.join(sorted(QUEUE_CLASSES))})"
        )
    return order


def take_over(crawler: Crawler, spider: Spider, queue_order: str, start_urls_key: str) -> None:
    """What the scheduler does to a spider it opens: say how a FIFO ``SCHEDULER_QUEUE_CLASS`` maps
    onto the frontier's order; name the scrapy-redis methods the spider's class defines that
    are not called (a WARNING each); turn an ``allowed_domains`` iterator into a list (scrapy-redis's
    example project sets ``filter(...)``, which Scrapy's offsite middlewares would each read, the
    second finding it empty); and unhook a scrapy-redis spider's ``spider_idle``, which pops start
    URLs without a lease (``LRANGE`` + ``LTRIM``: a worker that dies loses them): the frontier takes
    them from ``start_urls_key`` under lease instead."""
    if queue_order == "fifo":
        logger.info(
            "SCHEDULER_QUEUE_CLASS=%s: each host's requests are served first in, first out among those of one "
            "priority; a higher priority still goes first",
            crawler.settings.get("SCHEDULER_QUEUE_CLASS"),
        )
    for method, advice in unused_methods(spider):
        logger.warning("%s is not called here: %s", method, advice)
    domains = getattr(spider, "allowed_domains", None)
    if domains is not None and not isinstance(domains, (str, list, tuple, set, frozenset)):
        spider.allowed_domains = list(domains)  # type: ignore[attr-defined]
    if hasattr(spider, "redis_key") and hasattr(spider, "spider_idle"):
        crawler.signals.disconnect(spider.spider_idle, signals.spider_idle)
        logger.info(
            "%s: start URLs come from %s through the frontier (scrapy-redis's own reading is off)",
            type(spider).__name__,
            start_urls_key,
        )
