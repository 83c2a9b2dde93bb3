"""Redis connections from settings (``REDIS_URL``, ``REDIS_PARAMS``, as scrapy-redis), and URL redaction.

``REDIS_URL`` names a single Redis (``redis://``, ``rediss://`` for TLS, ``unix://``; an ACL
user as ``redis://user:password@host``), any node of a Redis Cluster (detected from ``INFO
cluster``, or declared with ``REDIS_CLUSTER=True``: the client is redis-py's ``RedisCluster``,
which follows ``MOVED`` and ``ASK`` and retries ``TRYAGAIN``), or a Sentinel-guarded primary:
``redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/<db>]``
(``rediss+sentinel://`` for TLS), through redis-py's ``Sentinel``, which finds the primary
again after a failover. The password of the URL is the data nodes'; sentinels that need one
of their own take it from ``REDIS_PARAMS["sentinel_kwargs"]``. A password is percent-encoded
(RFC 3986 section 3.2.1); a URL whose unencoded password a parser would split elsewhere is
refused (:func:`url_problem`), and no URL is shown without :func:`redact_url`.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import weakref
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.maint_notifications import MaintNotificationsConfig

from scrapy_frontier.config import read_value

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


#: Any failure of a Redis call: an outage (a connection error, a timeout, a failover), a refusal
#: (a full Redis, a wrong type, a script error) or redis-py's cluster client failing in its own
#: code. What a caller catches to report Redis's trouble in one line instead of a traceback
#: (:data:`scrapy_frontier.redis_health.OUTAGE_ERRORS` tells an outage from the rest).
REDIS_FAILURES: tuple[type[BaseException], ...] = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    OSError,
)


class ConfigError(Exception):
    """A connection setting is malformed or its server cannot be used. The message names the
    setting and never contains a password."""


#: How to write a password that holds one of the characters a URL gives a meaning to (RFC 3986
#: section 3.2.1: the userinfo is percent-encoded).
PERCENT_ENCODE_HINT = (
    "percent-encode the password ('#' %23, '/' %2F, '?' %3F, '@' %40, '%' %25, '[' %5B, ']' %5D; "
    "':' %3A in a user name)"
)

#: Query parameters whose value is treated as a secret (``?password=``, ``?auth_token=``, ...).
_SECRET_WORDS = ("pass", "secret", "token", "key", "auth", "cred")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be split into user, password, host and path safely, or ``None``: a
    character of its password that should have been percent-encoded (RFC 3986 section 3.2.1)
    makes a URL parser take part of the password for the host, the path, the query or the
    fragment (``redis://:p#ss@host``: the "host" is ``:p``). Never quotes the URL."""
    if "#" in url:
        return "it has a '#' (a fragment, or a '#' of the password)"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "it cannot be split into host and path (a '[' or ']' of the password?)"
    if "@" in parts.path or "@" in parts.query:
        return "it has an '@' after the host (a '/' or '?' of the password?)"
    if parts.query and any("=" not in piece for piece in parts.query.split("&")):
        return "a query parameter has no '=' (an '&' of a password?)"
    return None


def redact_url(url: str | None) -> str:
    """``url`` safe to log: a password (``user:***@``), a lone userinfo of a Redis URL (which
    redis-cli reads as a password), the values of query parameters from the first that looks
    secret (``?password=***``) on are replaced by ``***``; a URL that :func:`url_problem` finds
    malformed is shown as its scheme alone (``redis://***``), since any part of it may be a
    piece of its password, unless it has no userinfo at all (no ``@``, and no ``:`` outside an IP
    v6 literal's brackets: ``http://[::1`` is shown as it is)."""
    if not url:
        return repr(url)
    if url_problem(url) is not None:
        scheme, sep, rest = url.partition("://")
        if sep and "@" not in rest and ":" not in re.sub(r"\[[^\]]*(\]|$)", "", rest.split("/", 1)[0]):
            return url
        return f"{scheme}://***" if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) else "***"
    parts = urlsplit(url)
    if parts.netloc.startswith(":") and "@" not in parts.netloc:
        return f"{parts.scheme}://***"  # redis://:s3cret: a password without its '@host', taken for a port
    host = parts.netloc.rsplit("@", 1)[-1]
    if parts.password is not None:
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    elif parts.username is not None and parts.scheme.startswith(("redis", "unix")):
        parts = parts._replace(netloc=f"***@{host}")
    if parts.query:
        query, secret = [], False
        for k, v in parse_qsl(parts.query, keep_blank_values=True):
            secret = secret or any(w in k.lower() for w in _SECRET_WORDS)
            query.append((k, "***" if secret else v))
        parts = parts._replace(query=urlencode(query, safe="*"))
    return urlunsplit(parts)


#: scrapy-redis's scheduler: named in a project's settings without any Redis setting, it connects
#: to redis-py's default Redis, and so does this project.
SCRAPY_REDIS_SCHEDULER = "scrapy_redis.scheduler.Scheduler"
#: redis-py's default Redis (``redis.Redis()``), which scrapy-redis uses without REDIS_URL.
DEFAULT_REDIS_URL = "redis://localhost:6379/0"


def implied_redis_url(settings: BaseSettings) -> tuple[str, str] | None:
    """The Redis URL scrapy-redis would use when ``REDIS_URL`` is not set, and why: ``REDIS_HOST``
    (else ``REDIS_PARAMS["host"]``, else ``localhost``), ``REDIS_PORT`` (6379) and ``REDIS_DB`` (0)
    as scrapy-redis's ``connection.py`` hands them to ``redis.Redis``, when ``REDIS_HOST`` or
    ``REDIS_PORT`` is set; else redis-py's default Redis when ``SCHEDULER`` is scrapy-redis's;
    else ``None``. A password stays in ``REDIS_PARAMS``, out of the URL. Raises
    :class:`ConfigError` for a port or database that is not a number."""
    if read_value(settings, "REDIS_URL"):
        return None
    try:
        params = settings.getdict("REDIS_PARAMS")
    except (TypeError, ValueError):
        params = {}
    host = settings.get("REDIS_HOST") or params.get("host")
    port = settings.get("REDIS_PORT") or params.get("port")
    db = settings.get("REDIS_DB") or params.get("db") or 0
    if not host and not port:
        if settings.get("SCHEDULER") == SCRAPY_REDIS_SCHEDULER:
            return DEFAULT_REDIS_URL, f"SCHEDULER={SCRAPY_REDIS_SCHEDULER} without REDIS_URL, REDIS_HOST or REDIS_PORT"
        return None
    for name, value in (("REDIS_PORT", port or 6379), ("REDIS_DB", db)):
        if not str(value).strip().isdigit():
            raise ConfigError(f"Setting {name}={value!r:.50} is not a valid int")
    host = str(host or "localhost").strip()
    shown_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    given = ", ".join(n for n in ("REDIS_HOST", "REDIS_PORT", "REDIS_DB") if settings.get(n))
    return f"redis://{shown_host}:{int(str(port or 6379).strip())}/{int(str(db).strip())}", f"{given} without REDIS_URL"


def redis_url(settings: BaseSettings) -> str | None:
    """The crawl's Redis URL: ``REDIS_URL`` (from the settings or the environment), else the one
    scrapy-redis would use (:func:`implied_redis_url`), else ``None`` (embedded mode). Raises
    :class:`ConfigError` as :func:`implied_redis_url` does."""
    url = read_value(settings, "REDIS_URL")
    if url:
        return str(url)
    implied = implied_redis_url(settings)
    return implied[0] if implied else None


def _params(settings: BaseSettings) -> tuple[str, dict[str, Any]]:
    url = redis_url(settings)
    if not url or not isinstance(url, str):
        raise ConfigError("REDIS_URL is not set")
    problem = url_problem(url)
    if problem:
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: {problem}; {PERCENT_ENCODE_HINT}")
    parts = urlsplit(url)
    db = parts.path.strip("/")
    if parts.scheme not in ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel"):
        raise ConfigError(
            f"REDIS_URL {redact_url(url)} is malformed: scheme {parts.scheme!r} is not redis, rediss, unix, "
            "redis+sentinel or rediss+sentinel"
        )
    if parts.scheme in ("redis", "rediss") and db and not db.isdigit():
        # redis-py would silently fall back to database 0, another crawl's perhaps.
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: the database {db!r} is not a number")
    try:
        extra = settings.getdict("REDIS_PARAMS")
    except (TypeError, ValueError):
        raise ConfigError(
            f"REDIS_PARAMS={settings.get('REDIS_PARAMS')!r:.100} is not a dict of redis.Redis arguments"
        ) from None
    if "redis_cls" in extra:
        raise ConfigError(
            "REDIS_PARAMS['redis_cls'] is not supported: the client is redis-py's Redis, RedisCluster "
            "(REDIS_CLUSTER) or Sentinel primary, chosen from REDIS_URL; remove it"
        )
    params = {**REDIS_PARAMS, **extra}
    # scrapy-redis's REDIS_DECODE_RESPONSES and REDIS_ENCODING are for its own client; this one
    # reads bytes (REDIS_ENCODING decodes start URLs: scheduler/start_urls.py).
    for name in ("decode_responses", "url", "encoding"):
        params.pop(name, None)
    for setting, param in (("REDIS_PROTOCOL", "protocol"), ("REDIS_MAX_CONNECTIONS", "max_connections")):
        value = settings.get(setting)
        if value is None or value == "":
            continue
        if not str(value).strip().isdigit() or int(str(value).strip()) < 1 or (param == "protocol" and int(value) > 3):
            wanted = "2 or 3" if param == "protocol" else "an int >= 1"
            raise ConfigError(f"Setting {setting}={value!r:.50} is not valid: it must be {wanted}")
        params[param] = int(str(value).strip())
    return url, params


#: REDIS_URL -> whether it names a Redis Cluster, as found by :func:`detect_cluster` (or
#: :func:`sync_redis`) in this process.
_cluster_urls: dict[str, bool] = {}


def _declared_cluster(settings: BaseSettings, url: str) -> bool | None:
    declared = settings.get("REDIS_CLUSTER")
    if declared is None or declared == "":
        return _cluster_urls.get(url)
    try:
        return settings.getbool("REDIS_CLUSTER")
    except ValueError:
        raise ConfigError(
            f"REDIS_CLUSTER={declared!r:.50} is not a boolean (True, False or unset to detect it)"
        ) from None


def _hosts(url: str) -> list[tuple[str, str, str]]:
    """``(item, host, port)`` of each comma-separated ``host:port`` of ``url``'s netloc (``[IPv6]:port``
    too); the port is ``""`` when not given."""
    out = []
    for item in urlsplit(url).netloc.rsplit("@", 1)[-1].split(","):
        if item.startswith("["):  # [IPv6]:port
            host, _, port = item[1:].partition("]")
            port = port.lstrip(":")
        else:
            host, _, port = item.partition(":")
        out.append((item, host, port))
    return out


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, dict[str, Any]]:
    """``(sentinels, master name, connection arguments)`` of a ``redis+sentinel://`` URL."""
    parts = urlsplit(url)
    sentinels = []
    for item, host, port in _hosts(url):
        try:
            sentinels.append((host, int(port or 26379)))
        except ValueError:
            raise ConfigError(
                f"REDIS_URL {redact_url(url)} is malformed: sentinel {item!r} has no valid port"
            ) from None
        if not host:
            raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: a sentinel without a host")
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ConfigError(
            f"REDIS_URL {redact_url(url)} names no master: redis+sentinel://host:port[,host:port]/<master name>[/<db>]"
        )
    kwargs: dict[str, Any] = {}
    if len(path) > 1:
        if not path[1].isdigit():
            raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: the database {path[1]!r} is not a number")
        kwargs["db"] = int(path[1])
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    if parts.password is not None:
        kwargs["password"] = unquote(parts.password)
    if parts.scheme.startswith("rediss"):
        kwargs["ssl"] = True
    return sentinels, path[0], kwargs


def _cluster_nodes(url: str) -> list[tuple[str, int]] | None:
    """The nodes of a ``redis://`` or ``rediss://`` URL that lists several, comma-separated
    (``redis://[user:password@]host:port,host:port[/0]``): the nodes of a Redis Cluster to start
    from, each tried in turn. ``None`` for a URL with one host."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss") or "," not in parts.netloc.rsplit("@", 1)[-1]:
        return None
    nodes = []
    for item, host, port in _hosts(url):
        if not host or not (port or "6379").isdigit():
            raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: cluster node {item!r} is not host:port")
        nodes.append((host, int(port or 6379)))
    return nodes


def _cluster_of_nodes(url: str, nodes: list[tuple[str, int]], params: dict[str, Any], asyncio_client: bool) -> Any:
    """A ``RedisCluster`` client that starts from the first of ``nodes`` that answers."""
    parts = urlsplit(url)
    if parts.path.strip("/") not in ("", "0"):
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: a Redis Cluster has database 0 only")
    # retry_on_timeout: redis-py's cluster client retries timeouts itself (and warns about it)
    kwargs = {k: v for k, v in params.items() if k not in ("db", "retry_on_timeout")}
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    if parts.password is not None:
        kwargs["password"] = unquote(parts.password)
    if parts.scheme == "rediss":
        kwargs["ssl"] = True
    if asyncio_client:
        cls: Any = redis.asyncio.RedisCluster
        node_cls: Any = redis.asyncio.cluster.ClusterNode
        accepted = inspect.signature(cls.__init__).parameters
        kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    else:
        cls, node_cls = redis.RedisCluster, redis.cluster.ClusterNode
    return cls(startup_nodes=[node_cls(host, port) for host, port in nodes], **kwargs)


def _client(settings: BaseSettings, asyncio_client: bool) -> Any:
    url, params = _params(settings)
    lib: Any = redis.asyncio if asyncio_client else redis
    try:
        nodes = _cluster_nodes(url)
        if nodes:
            if _declared_cluster(settings, url) is False:
                raise ConfigError(
                    f"REDIS_URL {redact_url(url)} lists several nodes, which only a Redis Cluster has, "
                    "but REDIS_CLUSTER is False"
                )
            return _cluster_of_nodes(url, nodes, params, asyncio_client)
        if url.startswith(("redis+sentinel://", "rediss+sentinel://")):
            sentinels, master, kwargs = _sentinel_parts(url)
            # Sentinels answer at once or not at all: a short timeout, so a dead one is skipped fast.
            sentinel_kwargs = params.pop("sentinel_kwargs", None) or {"socket_timeout": 2, "socket_connect_timeout": 2}
            params.pop("maint_notifications_config", None)
            sentinel = lib.sentinel.Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs, **{**params, **kwargs})
            return sentinel.master_for(master)
        cluster = _declared_cluster(settings, url)
        if cluster is None and not asyncio_client:
            cluster = _probe_cluster(url, redis.Redis.from_url(url, **params))
        if cluster:
            params.pop("db", None)  # a cluster has database 0 only
            cls = redis.asyncio.RedisCluster if asyncio_client else redis.RedisCluster
            if asyncio_client:
                # The asyncio cluster client takes no **kwargs: leave out what it does not know
                # (retry_on_timeout: it retries timeouts itself).
                accepted = inspect.signature(cls.__init__).parameters
                params = {k: v for k, v in params.items() if k in accepted}
            return cls.from_url(url, **params)
        if "max_connections" in params:
            # REDIS_MAX_CONNECTIONS: a call waits for a free connection instead of failing
            return lib.Redis.from_pool(lib.BlockingConnectionPool.from_url(url, **params))
        return lib.Redis.from_url(url, **params)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"REDIS_URL {redact_url(url)} is malformed: {exc}") from None
    except redis.exceptions.RedisClusterException as exc:
        raise ConfigError(
            f"REDIS_URL {redact_url(url)} cannot be used as a Redis Cluster (REDIS_CLUSTER): {describe_error(exc)}"
        ) from None


def _probe_cluster(url: str, client: redis.Redis) -> bool:
    """Whether ``url``'s server is a cluster node (remembered); an unreachable one counts as
    not, unremembered: the client made for it then reports the error where it is used."""
    try:
        found = _cluster_urls[url] = bool(client.info("cluster").get("cluster_enabled"))
    except redis.exceptions.ResponseError:
        found = _cluster_urls[url] = False  # a server without INFO cluster (an old Redis, a proxy)
    except REDIS_FAILURES:
        found = False
    finally:
        client.close()
    return found


def async_redis(settings: BaseSettings) -> redis.asyncio.Redis:
    """An asyncio client for the reactor thread: a ``Redis``, a ``RedisCluster`` (declared by
    ``REDIS_CLUSTER``, or found by :func:`detect_cluster` earlier in this process) or a
    Sentinel's primary. Raises :class:`ConfigError` for a malformed URL."""
    return _client(settings, True)


def sync_redis(settings: BaseSettings) -> redis.Redis:
    """A blocking client, for commands and threads that run outside the reactor (a cluster is
    detected here with one ``INFO cluster`` unless ``REDIS_CLUSTER`` says)."""
    return _client(settings, False)


def text(value: bytes | str) -> str:
    """A Redis reply as text: the clients here return bytes (UTF-8), which redis-py's types
    cannot tell from ``str``."""
    return value.decode() if isinstance(value, bytes) else value


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, (redis.RedisCluster, redis.asyncio.RedisCluster))


async def detect_cluster(crawler: Any) -> redis.asyncio.Redis:
    """The crawler's shared client, replaced by a ``RedisCluster`` when ``REDIS_URL`` turns out
    to name a node of a Redis Cluster (``INFO cluster``, asynchronously: the scheduler calls
    this at open, before any other component uses the client). Later clients made from the
    same settings in this process are cluster clients too."""
    client = shared_redis(crawler)
    url = str(redis_url(crawler.settings))
    if (
        is_cluster(client)
        or _declared_cluster(crawler.settings, url) is not None
        or _cluster_nodes(url)
        or url.startswith(("redis+sentinel", "rediss+sentinel"))
    ):
        await ready(client)
        return client
    try:
        info = await client.info("cluster")
        found = bool(info.get("cluster_enabled"))
    except redis.exceptions.ResponseError:
        found = False
    _cluster_urls[url] = found
    if found:
        _shared.pop(crawler, None)
        await client.aclose()
        client = shared_redis(crawler)
        await ready(client)
    return client


async def ready(client: Any) -> None:
    """Read a cluster client's slot map now: redis-py's asyncio ``RedisCluster`` reads it on
    first use, and concurrent first uses (a page's pushes to several shards at once) race on it
    (connections closed under a command: ``'NoneType' object has no attribute 'writelines'``)."""
    if isinstance(client, redis.asyncio.RedisCluster):
        await client.initialize()


async def stop_listener(task: asyncio.Task[Any] | None, timeout: float = 2.0) -> None:
    """Cancel ``task`` (a loop over a pub/sub subscription) and wait for it to end, at most
    ``timeout`` seconds: a spider's close must not hang on it. redis-py's pub/sub read was seen
    to hold on to a cancellation for good after Redis restarted under it."""
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait({task}, timeout=timeout)


def client_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py failing inside its own code rather than a Redis error: its
    asyncio cluster client, while a failover tears connections down under commands in flight,
    raises ``AttributeError: 'NoneType' object has no attribute 'writelines'`` from its
    connection. Callers treat it as an outage (retry with backoff), not as a bug of theirs."""
    if not isinstance(exc, AttributeError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith("redis.")


def describe_error(exc: BaseException) -> str:
    """One line for a Redis error, without the URL (the caller names the setting), at most 300
    characters (redis-py's Sentinel errors carry the whole connection pool's repr)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        text = text.split(" : ", 1)[0]
    return f"{type(exc).__name__}: {text[:300]}"


# Keyed by the crawler itself, weakly: an ``id()`` is reused once a crawler is collected, and a
# new crawler (in tests, one per run in the same process) would get another's client and URL.
_shared: weakref.WeakKeyDictionary[Any, redis.asyncio.Redis] = weakref.WeakKeyDictionary()


def shared_redis(crawler: Any) -> redis.asyncio.Redis:
    """The one asyncio client (and connection pool) of a crawler, closed when its spider closes.
    Raises :class:`ConfigError` for a malformed ``REDIS_URL``."""
    client = _shared.get(crawler)
    if client is None:
        client = _shared[crawler] = async_redis(crawler.settings)
        owner = weakref.ref(crawler)

        async def close() -> None:
            crawler = owner()
            shared = _shared.pop(crawler, None) if crawler is not None else None
            if shared is not None:
                await shared.aclose()

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
