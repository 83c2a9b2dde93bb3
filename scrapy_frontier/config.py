"""Reading scrapy-frontier's settings: one reader, each setting's kind, bounds and default from
:data:`scrapy_frontier.defaults.TABLE`; and failing a crawl at start-up because of a setting: one
log line, then a clean close."""

from __future__ import annotations

import logging
import os
import weakref
from typing import TYPE_CHECKING, Any

from scrapy_frontier.defaults import FROM_ENVIRONMENT, SETTINGS, TABLE, Setting
from scrapy_frontier.scrapy_compat import close_when_opened

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

#: The crawlers a component has stopped at open (:func:`fail_at_open`), with the messages logged.
_failed: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

#: ``finish_reason`` of a crawl closed because a component could not use its settings;
#: ``scrapy crawl`` then exits with status 1 (:func:`scrapy_frontier.scrapy_internals.fail_the_run`).
CONFIG_ERROR = "config_error"
#: ``finish_reason`` of a crawl whose state in Redis was lost (a Redis restarted without
#: persistence); ``scrapy crawl`` then exits with status 1.
STATE_LOST = "state_lost"


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

    close_when_opened(crawler, CONFIG_ERROR)


def failed_at_open(crawler: Crawler) -> bool:
    """Whether a component of ``crawler`` has called :func:`fail_at_open`: the crawl stops as soon
    as it opens, so nothing should join a shared crawl or write to Redis meanwhile."""
    return crawler in _failed


def setting_or_env(settings: BaseSettings, name: str) -> Any:
    """``name``'s raw value, not parsed: from ``settings`` when a settings source set it (anything
    above Scrapy's ``default`` priority), else from the environment variable of the same name for
    the names in :data:`~scrapy_frontier.defaults.FROM_ENVIRONMENT`, else from ``settings`` or
    its default. The add-on copies it into the settings; components use :func:`read_value`."""
    priority = settings.getpriority(name)
    if priority is not None and priority > 0 and settings.get(name) not in (None, ""):
        return settings.get(name)
    if name in FROM_ENVIRONMENT and os.environ.get(name):
        return os.environ[name]
    return settings.get(name, SETTINGS.get(name))


def parse_value(setting: Setting, raw: Any) -> Any:
    """``raw`` (a value given for ``setting``, not ``None`` nor empty) as ``setting.kind``, read as
    Scrapy's typed getters read it (``getbool`` takes ``True``/``False``, ``1``/``0``,
    ``"true"``/``"false"``; ``getdict`` a dict or its JSON), a number finite and within
    ``setting.minimum`` (inclusive) and ``setting.above`` (exclusive); a ``str`` stripped, an
    ``object`` as given.
    Raises ``ValueError`` with a message that names the setting."""
    name, kind = setting.name, setting.kind
    if kind is object:
        return raw
    if kind is str:
        return str(raw).strip()
    from scrapy.settings import BaseSettings as Plain

    getters: dict[type, Callable[[Plain, str], Any]] = {
        int: Plain.getint,
        float: Plain.getfloat,
        bool: Plain.getbool,
        dict: Plain.getdict,
    }
    try:
        value = getters[kind](Plain({name: raw}), name)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"Setting {name}={raw!r} is not a valid {kind.__name__}") from None
    if kind in (bool, dict):
        return value
    if value != value or value in (float("inf"), float("-inf")):  # NaN passes every comparison below
        raise ValueError(f"Setting {name}={raw!r} is not a valid {kind.__name__}: a finite number is needed")
    minimum, above = setting.minimum, setting.above
    if (minimum is not None and value < minimum) or (above is not None and value <= above):
        bound = f">= {minimum}" if minimum is not None else f"> {above}"
        raise ValueError(f"Setting {name}={raw!r} is out of range: it must be {bound}")
    return value


def read_value(settings: BaseSettings, name: str) -> Any:
    """Setting ``name`` of :data:`~scrapy_frontier.defaults.TABLE`, parsed as its kind and checked
    against its bounds (:func:`parse_value`); for the names in
    :data:`~scrapy_frontier.defaults.FROM_ENVIRONMENT`, from the environment when no settings
    source sets it; when unset or empty, its default (``None`` for a setting unset by default).
    For code without a crawler (commands, the add-on). Raises ``ValueError`` with a message that
    names the setting, ``KeyError`` for a name not in the table (a programming error)."""
    setting = TABLE[name]
    raw = setting_or_env(settings, name) if setting.env else settings.get(name)
    if raw is None or raw == "":
        return setting.default
    return parse_value(setting, raw)


def read_setting(crawler: Crawler, name: str) -> Any:
    """:func:`read_value` for a component of ``crawler``: a value that does not parse or is out of
    range is reported once with :func:`fail_at_open` (the crawl then stops with
    ``config_error``) and the default is used meanwhile. Raises ``KeyError`` for a name not in
    :data:`~scrapy_frontier.defaults.TABLE` (a programming error)."""
    try:
        return read_value(crawler.settings, name)
    except ValueError as exc:
        fail_at_open(crawler, "%s", exc)
        return TABLE[name].default


#: Scrapy's settings checked at start (:func:`check_scrapy_settings`), each with its kind and
#: bounds (its default is Scrapy's). Each is read by Scrapy's own ``getint``, ``getfloat`` or ``getbool``
#: (scrapy/core/downloader, scrapy/core/scraper.py, scrapy/spidermiddlewares/depth.py,
#: scrapy/downloadermiddlewares/{retry,redirect}.py, scrapy/extensions/{closespider,throttle}.py), which
#: would end the crawl in a traceback; ``CONCURRENT_REQUESTS=0`` would leave no request slot and
#: the crawl would hang, ``CONCURRENT_ITEMS=0`` would drop every item and link without a word, and
#: a negative delay, depth or size would be taken silently. The yes/no ones are also read by the
#: add-on (``AUTOTHROTTLE_ENABLED``) before Scrapy's components.
SCRAPY_CHECKED: tuple[Setting, ...] = (
    Setting("CONCURRENT_REQUESTS", None, int, minimum=1),
    Setting("CONCURRENT_REQUESTS_PER_DOMAIN", None, int, minimum=1),
    Setting("CONCURRENT_REQUESTS_PER_IP", None, int, minimum=0),
    Setting("CONCURRENT_ITEMS", None, int, minimum=1),
    Setting("DOWNLOAD_TIMEOUT", None, float, above=0),
    Setting("DOWNLOAD_DELAY", None, float, minimum=0),
    Setting("DEPTH_LIMIT", None, int, minimum=0),
    Setting("RETRY_TIMES", None, int, minimum=0),
    Setting("DOWNLOAD_MAXSIZE", None, int, minimum=0),
    Setting("DOWNLOAD_WARNSIZE", None, int, minimum=0),
    Setting("REDIRECT_MAX_TIMES", None, int, minimum=0),
    Setting("CLOSESPIDER_TIMEOUT", None, float, minimum=0),
    Setting("CLOSESPIDER_TIMEOUT_NO_ITEM", None, int, minimum=0),
    Setting("CLOSESPIDER_ITEMCOUNT", None, int, minimum=0),
    Setting("CLOSESPIDER_PAGECOUNT", None, int, minimum=0),
    Setting("CLOSESPIDER_PAGECOUNT_NO_ITEM", None, int, minimum=0),
    Setting("CLOSESPIDER_ERRORCOUNT", None, int, minimum=0),
    Setting("AUTOTHROTTLE_START_DELAY", None, float, minimum=0),
    Setting("AUTOTHROTTLE_MAX_DELAY", None, float, minimum=0),
    Setting("AUTOTHROTTLE_TARGET_CONCURRENCY", None, float, above=0),
    Setting("AUTOTHROTTLE_ENABLED", None, bool),
    Setting("AUTOTHROTTLE_DEBUG", None, bool),
    Setting("COOKIES_ENABLED", None, bool),
    Setting("COOKIES_DEBUG", None, bool),
    Setting("ROBOTSTXT_OBEY", None, bool),
)


def check_scrapy_settings(settings: BaseSettings, crawler: Crawler | None) -> None:
    """Check :data:`SCRAPY_CHECKED` in ``settings`` (before Scrapy builds its engine, from the
    add-on's ``update_settings``). A bad value is reported with :func:`fail_at_open` (one line
    naming the setting and its value; ``scrapy crawl`` exits with status 1) and, like an empty
    one, replaced by Scrapy's default at the same priority, so that the engine can be built and
    closed cleanly. Without a ``crawler`` (an add-on built by hand), raises ``ValueError``
    instead."""
    from scrapy.settings import default_settings

    for setting in SCRAPY_CHECKED:
        name = setting.name
        priority = settings.getpriority(name)
        if priority is None:
            continue
        # CONCURRENT_REQUESTS_PER_IP is deprecated: reading its module attribute warns.
        scrapy_default = 0 if name == "CONCURRENT_REQUESTS_PER_IP" else getattr(default_settings, name)
        raw = settings[name]
        if raw is not None and raw != "":
            try:
                parse_value(setting, raw)
            except ValueError as exc:
                _refuse(crawler, exc)
                raw = None
        if raw is None or raw == "":
            settings.set(name, scrapy_default, priority)


def check_settings(settings: BaseSettings, crawler: Crawler | None) -> None:
    """Check every setting of :data:`~scrapy_frontier.defaults.TABLE` that is given (in
    ``settings`` or, for the names that take one, the environment) against its kind and bounds,
    before any component reads it: in embedded mode, the components that read the distributed
    ones are off, and a typo would otherwise surface only once the crawl goes distributed. A bad
    value is reported with :func:`fail_at_open` (``scrapy crawl`` exits with status 1); without a
    ``crawler``, raises ``ValueError``."""
    for name in TABLE:
        try:
            read_value(settings, name)
        except ValueError as exc:
            _refuse(crawler, exc)


def _refuse(crawler: Crawler | None, exc: ValueError) -> None:
    """A setting's refusal: :func:`fail_at_open` with its message, or ``exc`` raised without a crawler."""
    if crawler is None:
        raise exc
    fail_at_open(crawler, "%s", exc)
