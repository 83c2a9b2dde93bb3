"""The scheduler's settings, read and cross-checked once (:meth:`SchedulerConfig.from_crawler`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from scrapy_frontier.config import fail_at_open, read_setting
from scrapy_frontier.connection import ConfigError, redis_url
from scrapy_frontier.defaults import TABLE
from scrapy_frontier.dupefilter import DedupConfig
from scrapy_frontier.keys import crawl_id_error
from scrapy_frontier.politeness import SharedAutoThrottle, domain_concurrency, domain_rate
from scrapy_frontier.scrapy_redis_compat import close_after, queue_order, spider_options, waits_for_start_urls
from scrapy_frontier.serialize import is_utf8

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

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
    #: MAX_IDLE_TIME_BEFORE_CLOSE: seconds the whole crawl must have been idle before this worker
    #: closes (0: not set).
    idle_close: float
    persist: bool
    #: AutoThrottle for the whole crawl (None: off).
    autothrottle: SharedAutoThrottle | None
    #: Start-URL payloads taken per call, and the largest accepted (bytes).
    start_batch: int
    start_max_bytes: int
    start_as_set: bool
    #: REDIS_ENCODING, or the spider's ``redis_encoding``: the text encoding of start-URL payloads
    #: (a Python codec name).
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
    #: scrapy-redis's SCHEDULER_IDLE_BEFORE_CLOSE (seconds): how long the whole crawl must have been
    #: dry before a worker of a spider that does not wait for start URLs closes.
    idle_before_close: float = 0.0
    #: The order scrapy-redis's SCHEDULER_QUEUE_CLASS asked for: "priority", "fifo" or "lifo".
    queue_order: str = "priority"
    #: The spider's own start-URL key template (``redis_key``), ``None``: the settings'.
    start_urls_key: str | None = None
    #: Pages are revisited (REVISIT_INTERVAL > 0): the crawl never closes for being idle.
    revisit: bool = False
    #: REVISIT_MIN_INTERVAL and REVISIT_MAX_INTERVAL (seconds).
    revisit_bounds: tuple[float, float] = (60.0, 365 * 86400.0)
    #: Seconds the whole crawl must have been idle before this worker closes, 0 for never
    #: (:func:`~scrapy_frontier.scrapy_redis_compat.close_after`; set by :meth:`for_spider`).
    close_after: float = 0.0

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
        idle_before_close = 0.0
        raw_idle = settings.get("SCHEDULER_IDLE_BEFORE_CLOSE")
        if raw_idle not in (None, ""):
            try:
                idle_before_close = float(raw_idle)
            except (TypeError, ValueError):
                idle_before_close = -1.0
            if not idle_before_close >= 0:
                fail_at_open(crawler, "Setting SCHEDULER_IDLE_BEFORE_CLOSE=%r must be a number >= 0", raw_idle)
                idle_before_close = 0.0
        order = "priority"
        try:
            order = queue_order(settings.get("SCHEDULER_QUEUE_CLASS"))
        except ValueError as exc:
            fail_at_open(crawler, "%s", exc)
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
            autothrottle=SharedAutoThrottle.from_crawler(crawler),
            start_batch=read_setting(crawler, "REDIS_START_URLS_BATCH_SIZE"),
            start_max_bytes=read_setting(crawler, "REDIS_START_URLS_MAX_BYTES"),
            start_as_set=read_setting(crawler, "REDIS_START_URLS_AS_SET"),
            encoding=encoding,
            flush_on_start=read_setting(crawler, "SCHEDULER_FLUSH_ON_START"),
            domain_rate=domain_rate(crawler),
            domain_concurrency=domain_concurrency(crawler),
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
            idle_before_close=idle_before_close,
            queue_order=order,
            revisit=read_setting(crawler, "REVISIT_INTERVAL") > 0,
            revisit_bounds=(
                read_setting(crawler, "REVISIT_MIN_INTERVAL"),
                read_setting(crawler, "REVISIT_MAX_INTERVAL"),
            ),
        )

    def for_spider(self, spider: Spider, settings: BaseSettings) -> SchedulerConfig:
        """This config with the spider's own values, read from the spider instance
        (:func:`~scrapy_frontier.scrapy_redis_compat.spider_options`): a scrapy-redis spider's
        ``redis_key``, ``redis_batch_size`` (over ``REDIS_START_URLS_BATCH_SIZE``),
        ``redis_encoding`` (over ``REDIS_ENCODING``) and ``max_idle_time`` (over
        ``MAX_IDLE_TIME_BEFORE_CLOSE``), and when its workers close. Raises ``ValueError`` with a
        one-line message for an attribute the frontier cannot use."""
        options = spider_options(spider, settings)
        idle_close = options.max_idle_time if options.max_idle_time is not None else self.idle_close
        return replace(
            self,
            start_batch=options.batch_size or self.start_batch,
            encoding=options.encoding or self.encoding,
            start_urls_key=options.redis_key,
            idle_close=idle_close,
            close_after=close_after(idle_close, self.idle_before_close, waits_for_start_urls(spider)),
        )
