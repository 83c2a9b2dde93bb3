"""The add-on that wires scrapy-frontier into any Scrapy project.

List it in the project's settings and nothing else::

    ADDONS = {"scrapy_frontier.addon.DistributedAddon": 0}

Scrapy add-ons: https://docs.scrapy.org/en/latest/topics/addons.html. Everything here is set at
the ``addon`` priority, or added to a component dictionary only when the project has no entry
for that component, so a project's own settings, ``-s`` and a spider's ``custom_settings``
still win. Each part has its switch:

- the distributed scheduler and dupefilter, when ``REDIS_URL`` is set (in any settings source or
  in the environment), or scrapy-redis's ``REDIS_HOST`` / ``REDIS_PORT`` or scheduler
  (:mod:`scrapy_frontier.scrapy_redis_settings`: what each scrapy-redis setting becomes);
- downloader middlewares: retry with backoff and Retry-After in place of Scrapy's
  ``RetryMiddleware`` (``RETRY_ENABLED``), robots.txt fetched once per host for the whole crawl
  in place of Scrapy's ``RobotsTxtMiddleware`` (``ROBOTSTXT_OBEY``), cookies shared by every
  worker in place of Scrapy's ``CookiesMiddleware`` (``COOKIES_SHARED``), politeness shared by
  every worker (``POLITENESS_ENABLED``);
- spider middlewares: start requests the same on every Scrapy from 2.11
  (:mod:`scrapy_frontier.spidermiddlewares.start`: a spider's ``start_requests()`` where Scrapy 2.16
  and later no longer call it) and revisits (``REVISIT_INTERVAL``);
- item pipelines: validation (``VALIDATION_ENABLED``), the Redis cache (``REDIS_CACHE_ENABLED``),
  write-through storage to MySQL or SQLite (``STORAGE_ENABLED``);
- extensions: Prometheus metrics and JSON logs (``METRICS_ENABLED``, ``LOG_JSON``), the cluster's
  progress line in place of Scrapy's ``LogStats`` (``CLUSTER_LOGSTATS_ENABLED``), GC freeze
  (``GC_FREEZE_ENABLED``); and the log formatter (``LOG_FORMATTER``).

A built-in that the project disabled (set to ``None``) is not replaced: a project without
retries gets no retry middleware from here either. A scrapy-redis scheduler, dupefilter or stats
collector left in the settings is replaced, with one log line, since the two cannot share a crawl.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.extensions.logstats import LogStats
from scrapy.extensions.throttle import AutoThrottle
from scrapy.utils.misc import load_object

from scrapy_frontier import scrapy_internals, scrapy_redis_settings
from scrapy_frontier.config import (
    CONFIG_ERROR,
    STATE_LOST,
    check_scrapy_settings,
    check_settings,
    failed_at_open,
    setting_or_env,
)
from scrapy_frontier.defaults import FROM_ENVIRONMENT, SETTINGS
from scrapy_frontier.observability.logjson import use_json_formatter
from scrapy_frontier.scrapy_compat import set_in_component_priority_dict

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

SCHEDULER = "scrapy_frontier.scheduler.FrontierScheduler"
#: The frontier does the dedup, in Redis; Scrapy's dupefilter would only see this worker's requests.
DUPEFILTER = "scrapy.dupefilters.BaseDupeFilter"
LOG_FORMATTER = "scrapy_frontier.observability.logformatter.LogFormatter"
ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"

#: ``(setting, built-in it replaces or None, component, priority when the built-in is absent)``.
COMPONENTS: tuple[tuple[str, type | None, str, int], ...] = (
    (
        "DOWNLOADER_MIDDLEWARES",
        RobotsTxtMiddleware,
        "scrapy_frontier.downloadermiddlewares.robotstxt.SharedRobotsTxtMiddleware",
        100,
    ),
    (
        "DOWNLOADER_MIDDLEWARES",
        RetryMiddleware,
        "scrapy_frontier.downloadermiddlewares.retry.BackoffRetryMiddleware",
        550,
    ),
    (
        "DOWNLOADER_MIDDLEWARES",
        CookiesMiddleware,
        "scrapy_frontier.downloadermiddlewares.cookies.SharedCookiesMiddleware",
        700,
    ),
    # Last before the download: waits for the host's shared send time (distributed mode only).
    (
        "DOWNLOADER_MIDDLEWARES",
        None,
        "scrapy_frontier.downloadermiddlewares.politeness.SharedPolitenessMiddleware",
        960,
    ),
    # Just outside HttpErrorMiddleware (50): it takes a revisit's 304 before that middleware logs it.
    ("SPIDER_MIDDLEWARES", None, "scrapy_frontier.revisit.RevisitMiddleware", 60),
    # Nearest the spider: start requests the same on every Scrapy (start_requests() where 2.16+ skips it).
    ("SPIDER_MIDDLEWARES", None, "scrapy_frontier.spidermiddlewares.start.StartRequestsMiddleware", 990),
    ("ITEM_PIPELINES", None, "scrapy_frontier.pipelines.validation.ValidationPipeline", 100),
    ("ITEM_PIPELINES", None, "scrapy_frontier.pipelines.cache.RedisCachePipeline", 200),
    ("ITEM_PIPELINES", None, "scrapy_frontier.pipelines.storage.StoragePipeline", 300),
    ("EXTENSIONS", LogStats, "scrapy_frontier.observability.logstats.ClusterLogStats", 0),
    ("EXTENSIONS", None, "scrapy_frontier.observability.extension.Observability", 0),
    ("EXTENSIONS", None, "scrapy_frontier.gcfreeze.GcFreeze", 0),
)

_SCRAPY_REDIS = ("scrapy_redis.",)


def _entry(settings: BaseSettings, name: str, cls: type | str) -> tuple[bool, Any]:
    """Whether the component dictionary ``name`` (with its ``_BASE``) lists ``cls``, and its value."""
    target = load_object(cls) if isinstance(cls, str) else cls
    path = f"{target.__module__}.{target.__qualname__}"
    for source in (settings.getdict(name), settings.getdict(f"{name}_BASE")):
        for key, value in source.items():
            if isinstance(key, str) and key != path and key.rpartition(".")[0] not in sys.modules:
                # not imported here: a component in a module of its own may import the reactor
                # (the telnet console does), which must wait for Scrapy to install the asyncio one
                continue
            try:
                if (load_object(key) if isinstance(key, str) else key) is target:
                    return True, value
            except (ImportError, NameError, ValueError, AttributeError):
                continue
    return False, None


def _install(settings: BaseSettings, name: str, builtin: type | None, component: str, priority: int) -> None:
    present, _ = _entry(settings, name, component)
    if present:
        return  # the project placed (or disabled) it itself
    if builtin is not None:
        listed, position = _entry(settings, name, builtin)
        if listed and position is None:
            return  # the project disabled the built-in: nothing replaces it
        if listed:
            priority = position
        set_in_component_priority_dict(settings, name, builtin, None)
    set_in_component_priority_dict(settings, name, load_object(component), priority)


def _flag(settings: BaseSettings, name: str) -> bool:
    """A yes/no setting of this project, for the add-on's choices: a bad value counts as off here;
    the component that reads it stops the crawl at start with one line naming it (read_setting)."""
    try:
        return settings.getbool(name)
    except ValueError:
        return False


def delay_for_the_crawl(settings: BaseSettings) -> None:
    """Scrapy's ``DOWNLOAD_DELAY`` (seconds between two requests to a host, kept by each process)
    held for the whole crawl, when ``DOMAIN_RATE_LIMIT`` is unset: it becomes the crawl's rate,
    ``1 / DOWNLOAD_DELAY`` requests/second per host from all the workers together, and each
    worker's own delay goes (it would hold a request back past the send time booked for it).
    Logged at INFO. Both are set at ``DOWNLOAD_DELAY``'s priority."""
    delay = settings.getfloat("DOWNLOAD_DELAY")
    if delay <= 0:
        return
    if settings.get("DOMAIN_RATE_LIMIT") not in (None, ""):
        logger.info(
            "scrapy-frontier: DOWNLOAD_DELAY = %g stays each worker's own (Scrapy's), beside DOMAIN_RATE_LIMIT = %s "
            "for the whole crawl",
            delay,
            settings.get("DOMAIN_RATE_LIMIT"),
        )
        return
    priority = settings.getpriority("DOWNLOAD_DELAY") or "addon"
    settings.set("DOMAIN_RATE_LIMIT", 1 / delay, priority)
    settings.set("DOWNLOAD_DELAY", 0, priority)
    logger.info(
        "scrapy-frontier: DOWNLOAD_DELAY = %g holds for the whole crawl: each host gets at most %.4g requests/second "
        "from all the workers together (DOMAIN_RATE_LIMIT; set it to choose another rate)",
        delay,
        1 / delay,
    )


class DistributedAddon:
    """Wires scrapy-frontier into a crawl (see the module docstring). It also checks Scrapy's
    common numeric settings, in either mode, before Scrapy reads them
    (:func:`~scrapy_frontier.config.check_scrapy_settings`)."""

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler
        if crawler is not None:
            crawler.signals.connect(self._spider_closed, signals.spider_closed, weak=False)

    def _spider_closed(self, spider: Any, reason: str) -> None:
        """A crawl a setting stopped at start, or whose state in Redis was lost, ends ``scrapy crawl``
        with exit status 1 (the reason itself is the one error line logged before)."""
        assert self.crawler is not None
        if reason in (CONFIG_ERROR, STATE_LOST) or failed_at_open(self.crawler):
            scrapy_internals.fail_the_run(self.crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DistributedAddon:
        return cls(crawler)

    def update_settings(self, settings: BaseSettings) -> None:
        check_scrapy_settings(settings, self.crawler)
        if (settings.getpriority("TWISTED_REACTOR") or 0) <= 0:
            # Scrapy's default from 2.13; the Redis client and the storage thread need it on 2.11 and 2.12 too
            settings.set("TWISTED_REACTOR", ASYNCIO_REACTOR, "addon")
        for name, default in SETTINGS.items():
            settings.setdefault(name, default, "default")
        for name in FROM_ENVIRONMENT:
            value = setting_or_env(settings, name)
            if value not in (None, "") and (settings.getpriority(name) or 0) <= 0:
                settings.set(name, value, "addon")
        if self.crawler is not None and _flag(settings, "LOG_JSON") and settings.getbool("LOG_ENABLED"):
            # JSON from here on (the observability extension reports a LOG_JSON that does not parse)
            use_json_formatter(self.crawler, settings)
        for name, builtin, component, priority in COMPONENTS:
            _install(settings, name, builtin, component, priority)
        if settings.get("LOG_FORMATTER") == "scrapy.logformatter.LogFormatter":
            settings.set("LOG_FORMATTER", LOG_FORMATTER, "addon")
        scrapy_redis_settings.apply(settings, self.crawler)
        if not settings.get("REDIS_URL"):
            check_settings(settings, self.crawler)
            return
        for name, ours in (("SCHEDULER", SCHEDULER), ("DUPEFILTER_CLASS", DUPEFILTER)):
            current = settings.get(name)
            if isinstance(current, str) and current.startswith(_SCRAPY_REDIS):
                logger.info(
                    "scrapy-frontier: %s %s replaced by %s (the frontier takes over the crawl's Redis keys)",
                    name,
                    current,
                    ours,
                )
                settings.set(name, ours, settings.getpriority(name) or "addon")
            else:
                settings.set(name, ours, "addon")
        if _flag(settings, "POLITENESS_ENABLED"):
            delay_for_the_crawl(settings)
            if settings.getbool("AUTOTHROTTLE_ENABLED"):
                # AutoThrottle runs for the whole crawl (scrapy_frontier.politeness.SharedAutoThrottle):
                # Scrapy's, one per process, would hold each worker's sends back again, past their booking
                set_in_component_priority_dict(settings, "EXTENSIONS", AutoThrottle, None)
