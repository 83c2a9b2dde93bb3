"""Reading scrapy-frontier's settings: one reader, defaults from :mod:`scrapy_frontier.defaults`,
and failing a crawl at start-up because of a setting: one log line, then a clean close."""

from __future__ import annotations

import logging
import os
import weakref
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider

from scrapy_frontier.defaults import FROM_ENVIRONMENT, SETTINGS

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: The crawlers a component has stopped at open (:func:`fail_at_open`), with the messages logged.
_failed: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

#: ``finish_reason`` of a crawl closed because a component could not use its settings;
#: ``scrapy crawl`` then exits with status 2.
CONFIG_ERROR = "config_error"


def fail_at_open(crawler: Crawler, msg: str, *args: Any) -> None:
    """Log ``msg`` once (no traceback) and close the spider as soon as it is open.

    Components call this from ``open``/``open_spider`` instead of raising: Scrapy's engine honours
    a CloseSpider raised from ``spider_opened`` after every component has been opened, whereas
    one raised from the scheduler's ``open`` skips opening the scraper and logs a traceback.
    A message already logged for ``crawler`` (a setting that two components read) is not
    logged again.
    """
    text = msg % args if args else msg
    logged = _failed.setdefault(crawler, set())
    if text in logged:
        return
    first = not logged
    logged.add(text)
    logger.error("%s", text)
    if not first:
        return

    def close_now(spider: Any) -> None:
        raise CloseSpider(CONFIG_ERROR)

    crawler.signals.connect(close_now, signals.spider_opened, weak=False)


def failed_at_open(crawler: Crawler) -> bool:
    """Whether a component of ``crawler`` has called :func:`fail_at_open`: the crawl stops as soon
    as it opens, so nothing should join a shared crawl or write to Redis meanwhile."""
    return crawler in _failed


def setting_or_env(settings: BaseSettings, name: str) -> Any:
    """``name`` from ``settings`` when a settings source set it (anything above Scrapy's
    ``default`` priority), else from the environment variable of the same name for the names in
    :data:`~scrapy_frontier.defaults.FROM_ENVIRONMENT`, else its default."""
    priority = settings.getpriority(name)
    if priority is not None and priority > 0 and settings.get(name) not in (None, ""):
        return settings.get(name)
    if name in FROM_ENVIRONMENT and os.environ.get(name):
        return os.environ[name]
    return settings.get(name, SETTINGS.get(name))


def read_value(
    settings: BaseSettings,
    name: str,
    kind: type,
    *,
    minimum: float | None = None,
    above: float | None = None,
    default: Any = None,
) -> Any:
    """Setting ``name`` as ``kind`` (``bool``, ``int``, ``float`` or ``str``), read as Scrapy's
    typed getters read it (``getbool`` takes ``True``/``False``, ``1``/``0``, ``"true"``/``"false"``);
    from the environment too for the names in :data:`~scrapy_frontier.defaults.FROM_ENVIRONMENT`;
    when unset or empty, ``default`` or else its default from
    :data:`~scrapy_frontier.defaults.SETTINGS`. ``minimum`` is inclusive, ``above`` exclusive.
    Raises ``ValueError`` with a message that names the setting."""
    raw = setting_or_env(settings, name) if name in FROM_ENVIRONMENT else settings.get(name)
    if raw is None or raw == "":
        raw = SETTINGS[name] if default is None else default
    if kind is str:
        return str(raw).strip()
    from scrapy.settings import BaseSettings as Plain

    getter = {int: Plain.getint, float: Plain.getfloat, bool: Plain.getbool}[kind]
    try:
        value = getter(Plain({name: raw}), name)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"Setting {name}={raw!r} is not a valid {kind.__name__}") from None
    if kind is not bool and value != value:  # NaN passes every comparison below
        raise ValueError(f"Setting {name}={raw!r} is not a valid {kind.__name__}")
    if (minimum is not None and value < minimum) or (above is not None and value <= above):
        bound = f">= {minimum}" if minimum is not None else f"> {above}"
        raise ValueError(f"Setting {name}={raw!r} is out of range: it must be {bound}")
    return value


def read_setting(
    crawler: Crawler,
    name: str,
    kind: type,
    default: Any = None,
    *,
    minimum: float | None = None,
    above: float | None = None,
) -> Any:
    """:func:`read_value` for a component of ``crawler``: a value that does not parse or is out of
    range is reported once with :func:`fail_at_open` (the crawl then stops with
    ``config_error``) and the default is used meanwhile. ``default`` overrides the one in
    :data:`~scrapy_frontier.defaults.SETTINGS`. Raises ``KeyError`` for a name that has no
    default anywhere (a programming error)."""
    if default is None:
        default = SETTINGS[name]
    if crawler.settings.get(name) is None and name not in FROM_ENVIRONMENT:
        return default
    try:
        return read_value(crawler.settings, name, kind, minimum=minimum, above=above)
    except ValueError as exc:
        fail_at_open(crawler, "%s", exc)
        return default


#: Scrapy's numeric settings checked at start (:func:`check_scrapy_settings`):
#: ``(name, kind, minimum, exclusive lower bound)``. Each is read by Scrapy's own ``getint`` or
#: ``getfloat`` (scrapy/core/downloader, scrapy/spidermiddlewares/depth.py,
#: scrapy/downloadermiddlewares/{retry,redirect}.py, scrapy/extensions/closespider.py), which
#: would end the crawl in a traceback; ``CONCURRENT_REQUESTS=0`` would leave no request slot and
#: the crawl would hang, and a negative delay, depth or size would be taken silently.
SCRAPY_NUMERIC: tuple[tuple[str, type, float | None, float | None], ...] = (
    ("CONCURRENT_REQUESTS", int, 1, None),
    ("CONCURRENT_REQUESTS_PER_DOMAIN", int, 1, None),
    ("CONCURRENT_REQUESTS_PER_IP", int, 0, None),
    ("DOWNLOAD_TIMEOUT", float, None, 0),
    ("DOWNLOAD_DELAY", float, 0, None),
    ("DEPTH_LIMIT", int, 0, None),
    ("RETRY_TIMES", int, 0, None),
    ("DOWNLOAD_MAXSIZE", int, 0, None),
    ("DOWNLOAD_WARNSIZE", int, 0, None),
    ("REDIRECT_MAX_TIMES", int, 0, None),
    ("CLOSESPIDER_TIMEOUT", float, 0, None),
    ("CLOSESPIDER_TIMEOUT_NO_ITEM", int, 0, None),
    ("CLOSESPIDER_ITEMCOUNT", int, 0, None),
    ("CLOSESPIDER_PAGECOUNT", int, 0, None),
    ("CLOSESPIDER_PAGECOUNT_NO_ITEM", int, 0, None),
    ("CLOSESPIDER_ERRORCOUNT", int, 0, None),
)


def check_scrapy_settings(settings: BaseSettings, crawler: Crawler | None) -> None:
    """Check :data:`SCRAPY_NUMERIC` in ``settings`` (before Scrapy builds its engine, from the
    add-on's ``update_settings``). A bad value is reported with :func:`fail_at_open` (one line
    naming the setting and its value; ``scrapy crawl`` exits with status 2) and, like an empty
    one, replaced by Scrapy's default at the same priority, so that the engine can be built and
    closed cleanly. Without a ``crawler`` (an add-on built by hand), raises ``ValueError``
    instead."""
    from scrapy.settings import default_settings

    for name, kind, minimum, above in SCRAPY_NUMERIC:
        priority = settings.getpriority(name)
        if priority is None:
            continue
        # CONCURRENT_REQUESTS_PER_IP is deprecated: reading its module attribute warns.
        scrapy_default = 0 if name == "CONCURRENT_REQUESTS_PER_IP" else getattr(default_settings, name)
        raw = settings[name]
        try:
            read_value(settings, name, kind, minimum=minimum, above=above, default=scrapy_default)
        except ValueError as exc:
            if crawler is None:
                raise
            fail_at_open(crawler, "%s", exc)
            raw = None
        if raw is None or raw == "":
            settings.set(name, scrapy_default, priority)
