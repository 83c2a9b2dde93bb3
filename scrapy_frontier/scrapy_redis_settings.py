"""What a scrapy-redis setting left in a project becomes (docs/spiders.md, "scrapy-redis
settings"): honoured, mapped onto its nearest equivalent, or refused at start in one line naming
it and what to use instead (:func:`~scrapy_frontier.config.fail_at_open`: ``scrapy crawl``
exits with status 1). The add-on calls :func:`adopt` from ``update_settings``, before any
component reads the settings.

The connection settings (``REDIS_HOST``, ``REDIS_PORT``, ``REDIS_DB``, ``REDIS_PROTOCOL``,
``REDIS_MAX_CONNECTIONS``, ``REDIS_PARAMS``) are read by :mod:`scrapy_frontier.connection`,
which the commands use without the add-on; the scheduler reads the others it honours
(``SCHEDULER_PERSIST``, ``SCHEDULER_FLUSH_ON_START``, ``REDIS_ENCODING``, the key names, ...).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy_frontier.config import fail_at_open, parse_value
from scrapy_frontier.connection import ConfigError, implied_redis_url
from scrapy_frontier.defaults import TABLE

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: scrapy-redis's stats collector and the one that takes its place.
SCRAPY_REDIS_STATS = "scrapy_redis.stats.RedisStatsCollector"
STATS_CLASS = "scrapy.statscollectors.MemoryStatsCollector"

#: scrapy-redis's idle backoff settings that have no counterpart: the frontier's poll backs off
#: on its own (from 50 ms, doubling, up to FRONTIER_POLL_MAX).
_BACKOFF_SHAPE = ("REDIS_IDLE_BACKOFF_ENABLED", "REDIS_IDLE_BACKOFF_MIN", "REDIS_IDLE_BACKOFF_FACTOR")


def _set(settings: BaseSettings, name: str) -> bool:
    return settings.getpriority(name) is not None and settings.get(name) not in (None, "")


def _refuse(crawler: Crawler | None, message: str) -> None:
    if crawler is None:
        raise ValueError(message)
    fail_at_open(crawler, "%s", message)


def redis_key_problem(spidercls: type) -> str | None:
    """Why a spider class's ``redis_key`` cannot be used, or ``None``: a list of keys (scrapy-redis
    master's several start-URL keys). ``scrapy crawl`` checks it before the spider is made, since
    scrapy-redis 0.9.1's own ``setup_redis`` fails on a list."""
    if isinstance(getattr(spidercls, "redis_key", None), (list, tuple)):
        return (
            f"{spidercls.__name__}.redis_key is a list of keys: not supported; use one start-URL key, with "
            'each payload\'s priority in JSON: {"url": "...", "priority": 10}'
        )
    return None


def apply(settings: BaseSettings, crawler: Crawler | None) -> None:
    """Apply the fate of every scrapy-redis setting in ``settings`` (at the ``addon`` priority,
    never over a value a settings source gave). Sets ``REDIS_URL`` from ``REDIS_HOST`` /
    ``REDIS_PORT`` / ``REDIS_DB``, or to redis-py's default Redis for scrapy-redis's scheduler
    (:func:`~scrapy_frontier.connection.implied_redis_url`), which turns distributed mode on;
    the rest applies in distributed mode only. A refusal is reported with
    :func:`~scrapy_frontier.config.fail_at_open`; without a ``crawler`` (an add-on built by
    hand) it raises ``ValueError``."""
    try:
        implied = implied_redis_url(settings)
    except ConfigError as exc:
        _refuse(crawler, str(exc))
        return
    if implied is not None:
        url, reason = implied
        # over an empty REDIS_URL of any priority (REDIS_URL = os.environ.get("REDIS_URL", ""))
        settings.set("REDIS_URL", url, settings.getpriority("REDIS_URL") or "addon")
        logger.info("scrapy-frontier: distributed crawl on %s (%s, as scrapy-redis connects)", url, reason)
    if not settings.get("REDIS_URL"):
        return
    stats = settings.get("STATS_CLASS")
    if stats == SCRAPY_REDIS_STATS:
        logger.info(
            "scrapy-frontier: STATS_CLASS %s replaced by %s (each worker adds its counts to the cluster totals in "
            "the STATS_KEY hash, <spider>:stats)",
            stats,
            STATS_CLASS,
        )
        settings.set("STATS_CLASS", STATS_CLASS, settings.getpriority("STATS_CLASS") or "addon")
    if settings.getbool("REDIS_START_URLS_AS_ZSET"):
        _refuse(
            crawler,
            "REDIS_START_URLS_AS_ZSET is not supported: push start URLs to a list (lpush, or scrapy push), "
            'with their priority in a JSON payload: {"url": "...", "priority": 10}',
        )
    problem = redis_key_problem(crawler.spidercls) if crawler is not None else None
    if problem:
        _refuse(crawler, problem)
    if _set(settings, "REDIS_KEY_CHECK_INTERVAL"):
        _refuse(
            crawler,
            "REDIS_KEY_CHECK_INTERVAL is not supported (a spider reads one start-URL key): remove it, and give "
            'payloads a priority in JSON instead of keys in order: {"url": "...", "priority": 10}',
        )
    if _set(settings, "REDIS_IDLE_BACKOFF_MAX") and (settings.getpriority("FRONTIER_POLL_MAX") or 0) <= 0:
        try:
            parse_value(TABLE["FRONTIER_POLL_MAX"], settings.get("REDIS_IDLE_BACKOFF_MAX"))
        except ValueError:
            _refuse(
                crawler,
                f"Setting REDIS_IDLE_BACKOFF_MAX={settings.get('REDIS_IDLE_BACKOFF_MAX')!r:.50} is not valid: it must "
                "be a number of seconds > 0",
            )
            return
        settings.set("FRONTIER_POLL_MAX", settings.get("REDIS_IDLE_BACKOFF_MAX"), "addon")
        logger.info(
            "scrapy-frontier: REDIS_IDLE_BACKOFF_MAX=%s taken as FRONTIER_POLL_MAX (the longest wait between polls of "
            "an empty frontier)",
            settings.get("REDIS_IDLE_BACKOFF_MAX"),
        )
    shape = [name for name in _BACKOFF_SHAPE if _set(settings, name)]
    if shape:
        logger.info(
            "scrapy-frontier: %s not used: an idle worker's polls back off from 50 ms, doubling, up to "
            "FRONTIER_POLL_MAX=%s seconds",
            ", ".join(shape),
            settings.get("FRONTIER_POLL_MAX"),
        )
