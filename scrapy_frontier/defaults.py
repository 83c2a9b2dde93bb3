"""Every setting scrapy-frontier adds, with its default: the one place defaults are written
(as scrapy-redis's ``defaults.py``). docs/settings.md documents each one.

:func:`scrapy_frontier.config.read_setting` takes its defaults from :data:`SETTINGS`; the add-on
(:mod:`scrapy_frontier.addon`) puts them in a crawl's settings at Scrapy's ``default`` priority.
"""

from __future__ import annotations

from typing import Any

#: Settings that, when no settings source sets them, are read from the environment variable of the
#: same name (twelve-factor style: containers and scrapyd jobs are configured through it).
FROM_ENVIRONMENT = ("REDIS_URL", "MYSQL_URL", "LOG_JSON", "METRICS_ENABLED", "METRICS_HOST", "METRICS_PORT")

#: The longest start-URL payload accepted (bytes), by the scheduler and the ``push`` and
#: ``forget`` commands.
START_URLS_MAX_BYTES = 65_536
#: The port range the metrics endpoint tries, first free port wins.
METRICS_PORTS = "9410-9429"
#: Longest Retry-After honoured (seconds), by the retry and the politeness middlewares.
RETRY_AFTER_MAX = 300.0

SETTINGS: dict[str, Any] = {
    # Connections (scrapy-redis names).
    "REDIS_URL": None,
    "REDIS_PARAMS": {},
    # None: detected from INFO cluster; True/False: declared.
    "REDIS_CLUSTER": None,
    "MYSQL_URL": None,
    "SQLITE_PATH": "crawl.sqlite3",
    # A crawl's name in Redis: keys are <spider>:... or, with CRAWL_ID, <spider>@<crawl id>:...
    "CRAWL_ID": "",
    # The frontier and its scheduler.
    "FRONTIER_PREFETCH": 0,
    # None: unsharded on a single Redis, dupefilter.CLUSTER_SHARDS on a Redis Cluster.
    "FRONTIER_SHARDS": None,
    # None: 1 on a Redis Cluster whose masters have replicas, else 0.
    "FRONTIER_WAIT_REPLICAS": None,
    "FRONTIER_WAIT_TIMEOUT": 1.0,
    "FRONTIER_HEARTBEAT_INTERVAL": 5.0,
    "FRONTIER_NODE_TIMEOUT": 0.0,
    "FRONTIER_POLL_MAX": 1.0,
    "FRONTIER_LOCAL_SEEN": 200_000,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 0.0,
    "SCHEDULER_PERSIST": False,
    "REDIS_START_URLS_BATCH_SIZE": 100,
    "REDIS_START_URLS_MAX_BYTES": START_URLS_MAX_BYTES,
    "REDIS_START_URLS_AS_SET": False,
    "DEAD_LETTER_DIR": ".",
    # The dupefilter.
    "DUPEFILTER_MODE": "exact",
    "DUPEFILTER_RECRAWL_AGE": 0.0,
    # Exact layout of a new crawl: buckets for this many fingerprints (more just takes more memory).
    "DUPEFILTER_CAPACITY": 10_000_000,
    "DUPEFILTER_BLOOM_CAPACITY": 10_000_000,
    "DUPEFILTER_BLOOM_ERROR_RATE": 1e-6,
    # Politeness shared by every worker.
    "POLITENESS_ENABLED": True,
    "DOMAIN_RATE_LIMIT": 0.0,
    "DOMAIN_RATE_LIMITS": {},
    "DOMAIN_CONCURRENCY": 0,
    "POLITENESS_REFRESH": 2.0,
    "POLITENESS_MIN_FACTOR": 0.05,
    "POLITENESS_RECOVERY_STEP": 0.1,
    "POLITENESS_BASE_RATE": 10.0,
    "ROBOTSTXT_CACHE_TTL": 86_400,
    # Retries.
    "RETRY_BACKOFF_BASE": 1.0,
    "RETRY_BACKOFF_MAX": 60.0,
    "RETRY_AFTER_MAX": RETRY_AFTER_MAX,
    # Item pipelines.
    "VALIDATION_ENABLED": True,
    "REDIS_CACHE_ENABLED": True,
    "REDIS_CACHE_TTL": 7 * 24 * 3600,
    "REDIS_CACHE_ITEMS": False,
    "REDIS_CACHE_CAPACITY": 10_000_000,
    "REDIS_ITEMS_LIST": False,
    "STORAGE_ENABLED": True,
    "STORAGE_BATCH_SIZE": 200,
    "STORAGE_FLUSH_INTERVAL": 0.0,
    "STORAGE_RETRY_TIMEOUT": 60.0,
    # None: the project's items module (STORAGE_ITEM_TYPES); no key field (STORAGE_DOCUMENT_KEY).
    "STORAGE_ITEM_TYPES": None,
    "STORAGE_DOCUMENT_KEY": None,
    # Logs, metrics, memory.
    "LOG_JSON": False,
    "METRICS_ENABLED": True,
    "METRICS_HOST": "127.0.0.1",
    "METRICS_PORT": METRICS_PORTS,
    "METRICS_REFRESH_INTERVAL": 5.0,
    "CLUSTER_LOGSTATS_ENABLED": True,
    "GC_FREEZE_ENABLED": True,
}
