"""The scheduler's settings, read and cross-checked once (:meth:`SchedulerConfig.from_crawler`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from scrapy_frontier.config import fail_at_open, read_setting
from scrapy_frontier.connection import ConfigError, redis_url
from scrapy_frontier.defaults import TABLE
from scrapy_frontier.dupefilter import DedupConfig
from scrapy_frontier.keys import crawl_id_error
from scrapy_frontier.serialize import is_utf8

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

#: The most frontier shards a crawl can have: the hash slots of a Redis Cluster.
MAX_SHARDS = 16384


@dataclass(frozen=True)
class SchedulerConfig:
    """What :class:`~scrapy_frontier.scheduler.FrontierScheduler` reads from the settings
    (docs/settings.md), as plain values. ``None`` in ``shards`` and ``wait_replicas`` means "not
    set": the join decides from the Redis it finds. ``dedup`` is ``None`` when the dupefilter
    settings are invalid (the crawl then stops at open)."""

    #: Requests held locally, leased ahead (requests).
    prefetch: int
    #: Seconds between two heartbeats.
    heartbeat_interval: float
    #: Seconds of silence after which a node is dead and its leases are reclaimed.
    node_timeout: float
    #: Longest wait between two lease calls that found nothing (seconds).
    poll_max: float
    #: Seconds the whole crawl must have been idle before this worker closes (0: never).
    idle_close: float
    persist: bool
    #: Start-URL payloads taken per call, and the largest accepted (bytes).
    start_batch: int
    start_max_bytes: int
    start_as_set: bool
    #: The start-URL payloads' encoding (a Python codec name).
    encoding: str
    #: Clear the crawl's frontier, dupefilter and leases when this worker starts it alone.
    flush_on_start: bool
    #: Requests/second per host (0: no rate), and requests in flight per host (0: no cap).
    domain_rate: float
    domain_concurrency: int
    #: Fingerprints the local first look keeps (0: none).
    local_seen_max: int
    shards: int | None
    #: Seconds between two reads of the live rates of a sharded crawl.
    rates_refresh: float
    wait_replicas: int | None
    #: Longest wait for the replicas (seconds).
    wait_timeout: float
    dupefilter_debug: bool
    dedup: DedupConfig | None
    redis_url: str | None
    crawls_key: str
    dead_letter_dir: str
    #: Scrapy's DOWNLOAD_MAXSIZE (bytes, 0: no limit): a dead letter's response is cut to it.
    download_maxsize: int

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SchedulerConfig:
        """Read every setting of the scheduler. A value that does not parse, is out of range or
        contradicts another is reported in one line by :func:`~scrapy_frontier.config.fail_at_open`
        (the crawl stops with ``config_error`` once open); its default stands meanwhile."""
        settings = crawler.settings
        heartbeat = read_setting(crawler, "FRONTIER_HEARTBEAT_INTERVAL")
        node_timeout = read_setting(crawler, "FRONTIER_NODE_TIMEOUT") or 6 * heartbeat
        if node_timeout < 2 * heartbeat:
            fail_at_open(
                crawler,
                "Setting FRONTIER_NODE_TIMEOUT=%r is out of range: it must be >= %s "
                "(twice FRONTIER_HEARTBEAT_INTERVAL)",
                settings.get("FRONTIER_NODE_TIMEOUT"),
                2 * heartbeat,
            )
        shards = read_setting(crawler, "FRONTIER_SHARDS")
        if shards is not None and shards > MAX_SHARDS:
            fail_at_open(
                crawler,
                "Setting FRONTIER_SHARDS=%r is out of range: at most %s (the hash slots of a Redis Cluster)",
                shards,
                MAX_SHARDS,
            )
        crawl_error = crawl_id_error(str(settings.get("CRAWL_ID") or "").strip())
        if crawl_error:
            fail_at_open(crawler, "%s", crawl_error)
        encoding = read_setting(crawler, "REDIS_ENCODING")
        try:
            is_utf8(encoding)
        except LookupError:
            fail_at_open(crawler, "Setting REDIS_ENCODING=%r is not an encoding Python knows", encoding)
            encoding = TABLE["REDIS_ENCODING"].default
        try:
            url = redis_url(settings)
        except ConfigError as exc:
            fail_at_open(crawler, "%s", exc)
            url = None
        dedup: DedupConfig | None
        try:
            dedup = DedupConfig.from_settings(settings)
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
            dedup = None
        return cls(
            prefetch=read_setting(crawler, "FRONTIER_PREFETCH") or settings.getint("CONCURRENT_REQUESTS"),
            heartbeat_interval=heartbeat,
            node_timeout=node_timeout,
            poll_max=read_setting(crawler, "FRONTIER_POLL_MAX"),
            idle_close=read_setting(crawler, "MAX_IDLE_TIME_BEFORE_CLOSE"),
            persist=read_setting(crawler, "SCHEDULER_PERSIST"),
            start_batch=read_setting(crawler, "REDIS_START_URLS_BATCH_SIZE"),
            start_max_bytes=read_setting(crawler, "REDIS_START_URLS_MAX_BYTES"),
            start_as_set=read_setting(crawler, "REDIS_START_URLS_AS_SET"),
            encoding=encoding,
            flush_on_start=read_setting(crawler, "SCHEDULER_FLUSH_ON_START"),
            domain_rate=read_setting(crawler, "DOMAIN_RATE_LIMIT"),
            domain_concurrency=read_setting(crawler, "DOMAIN_CONCURRENCY"),
            local_seen_max=read_setting(crawler, "FRONTIER_LOCAL_SEEN"),
            shards=shards,
            rates_refresh=read_setting(crawler, "POLITENESS_REFRESH"),
            wait_replicas=read_setting(crawler, "FRONTIER_WAIT_REPLICAS"),
            wait_timeout=read_setting(crawler, "FRONTIER_WAIT_TIMEOUT"),
            dupefilter_debug=settings.getbool("DUPEFILTER_DEBUG"),
            dedup=dedup,
            redis_url=url,
            crawls_key=read_setting(crawler, "CRAWLS_KEY"),
            dead_letter_dir=read_setting(crawler, "DEAD_LETTER_DIR"),
            download_maxsize=settings.getint("DOWNLOAD_MAXSIZE"),
        )

    def for_spider(self, spider: Spider) -> SchedulerConfig:
        """This config with the spider's own values: a scrapy-redis spider's ``redis_batch_size``
        (start URLs taken per call) over ``REDIS_START_URLS_BATCH_SIZE``."""
        own: dict[str, Any] = {}
        batch = getattr(type(spider), "redis_batch_size", None)
        if batch:
            own["start_batch"] = int(batch)
        return replace(self, **own) if own else self
