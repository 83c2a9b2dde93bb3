"""Redis connections from settings (``REDIS_URL``, ``REDIS_PARAMS``, as scrapy-redis), and URL redaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.maint_notifications import MaintNotificationsConfig

from scrapy_frontier.config import setting_or_env

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: Connection defaults; REDIS_PARAMS overrides any of them. Responses stay bytes.
REDIS_PARAMS: dict[str, Any] = {
    "socket_timeout": 30,
    "socket_connect_timeout": 10,
    "retry_on_timeout": True,
    "health_check_interval": 30,
    # Redis Cloud maintenance push notifications: not used, and probing for them logs a DEBUG
    # line per connection on a plain Redis.
    "maint_notifications_config": MaintNotificationsConfig(enabled=False),
}


class ConfigError(Exception):
    """A connection setting is malformed or its server cannot be used. The message names the
    setting and never contains a password."""


def redact_url(url: str | None) -> str:
    """``url`` safe to log: a password (``user:***@``), a lone userinfo of a Redis URL (which
    redis-cli reads as a password) and query parameters that look secret are replaced by ``***``."""
    if not url:
        return repr(url)
    try:
        parts = urlsplit(url)
        host = parts.netloc.rsplit("@", 1)[-1]
        if parts.password is not None:
            parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
        elif parts.username is not None and parts.scheme.startswith(("redis", "unix")):
            parts = parts._replace(netloc=f"***@{host}")
        if parts.query:
            query = [(k, "***" if any(w in k.lower() for w in ("pass", "secret", "token", "key", "auth")) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
            parts = parts._replace(query=urlencode(query, safe="*"))
        return urlunsplit(parts)
    except ValueError:
        return "<unparsable URL>"


def _params(settings: BaseSettings) -> tuple[str, dict[str, Any]]:
    url = setting_or_env(settings, "REDIS_URL")
    if not url or not isinstance(url, str):
        raise ConfigError("REDIS_URL is not set")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: {exc}") from None
    db = parts.path.strip("/")
    if parts.scheme in ("redis", "rediss") and db and not db.isdigit():
        # redis-py would silently fall back to database 0, another crawl's perhaps.
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: the database {db!r} is not a number")
    try:
        extra = settings.getdict("REDIS_PARAMS")
    except (TypeError, ValueError):
        raise ConfigError(f"REDIS_PARAMS={settings.get('REDIS_PARAMS')!r:.100} is not a dict of redis.Redis arguments") from None
    params = {**REDIS_PARAMS, **extra}
    params.pop("decode_responses", None)
    params.pop("url", None)
    return url, params


def async_redis(settings: BaseSettings) -> redis.asyncio.Redis:
    """An asyncio client for the reactor thread. Raises :class:`ConfigError` for a malformed URL."""
    url, params = _params(settings)
    try:
        return redis.asyncio.Redis.from_url(url, **params)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: {exc}") from None


def sync_redis(settings: BaseSettings) -> redis.Redis:
    """A blocking client, for commands that run outside the reactor."""
    url, params = _params(settings)
    try:
        return redis.Redis.from_url(url, **params)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: {exc}") from None


def describe_error(exc: BaseException) -> str:
    """One line for a Redis error, without the URL (the caller names the setting)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {text}"


_shared: dict[int, redis.asyncio.Redis] = {}
def shared_redis(crawler: Any) -> redis.asyncio.Redis:
    """The one asyncio client (and connection pool) of a crawler, closed when its spider closes.
    Raises :class:`ConfigError` for a malformed ``REDIS_URL``."""
    key = id(crawler)
    client = _shared.get(key)
    if client is None:
        client = _shared[key] = async_redis(crawler.settings)

        async def close() -> None:
            if _shared.pop(key, None) is not None:
                await client.aclose()

        from scrapy import signals

        crawler.signals.connect(close, signals.spider_closed, weak=False)
    return client


def optional_shared_redis(crawler: Any) -> redis.asyncio.Redis | None:
    """:func:`shared_redis`, or ``None`` in embedded mode or when ``REDIS_URL`` is malformed
    (the scheduler reports that one, once)."""
    if not crawler.settings.get("REDIS_URL"):
        return None
    try:
        return shared_redis(crawler)
    except ConfigError:
        return None
