"""Project settings. Every setting this project adds is documented once, in README.md.

Scrapy settings reference: https://docs.scrapy.org/en/latest/topics/settings.html
"""

import os

BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
COMMANDS_MODULE = "scrapy_frontier.commands"

# Distributed mode is on when REDIS_URL is set (here, with -s, or in the environment).
REDIS_URL = os.environ.get("REDIS_URL") or None
# MySQL write-through storage when MYSQL_URL is set; an SQLite file otherwise.
MYSQL_URL = os.environ.get("MYSQL_URL") or None

ADDONS = {"scrapy_frontier.addon.DistributedAddon": 0}

ROBOTSTXT_OBEY = True
USER_AGENT = "crawler (+https://github.com/)"
CONCURRENT_REQUESTS = 32
CONCURRENT_REQUESTS_PER_DOMAIN = 8
# Scrapy 2.19's scraper starts CONCURRENT_ITEMS tasks for every response, whatever its callback
# yields (scrapy/utils/asyncio.py, _parallel_asyncio), and keeps them until the response's last
# item is through the pipelines: at Scrapy's 100, creating them took 16% of a worker's CPU on the
# benchmark site and the tasks of responses waiting for their items' commit made every garbage
# collection slower. 16 items (or requests) of one response still go through at once.
CONCURRENT_ITEMS = 16
DOWNLOAD_TIMEOUT = 30
# Per-domain throttling: AutoThrottle adapts the delay to each domain's latency.
AUTOTHROTTLE_ENABLED = True
AUTOTHROTTLE_START_DELAY = 0.5
AUTOTHROTTLE_MAX_DELAY = 30.0
AUTOTHROTTLE_TARGET_CONCURRENCY = 4.0

ITEM_PIPELINES = {
    "scrapy_frontier.pipelines.validation.ValidationPipeline": 100,
    "scrapy_frontier.pipelines.cache.RedisCachePipeline": 200,
    "scrapy_frontier.pipelines.storage.StoragePipeline": 300,
}

DOWNLOADER_MIDDLEWARES = {
    # Our retry replaces Scrapy's (same position, same stats, plus backoff and Retry-After).
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    # robots.txt fetched once per host for the whole crawl (Scrapy's own in embedded mode).
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "scrapy_frontier.downloadermiddlewares.robotstxt.SharedRobotsTxtMiddleware": 100,
    "scrapy_frontier.downloadermiddlewares.retry.BackoffRetryMiddleware": 550,
    # Last before the download: waits for the host's shared send time (distributed mode only).
    "scrapy_frontier.downloadermiddlewares.politeness.SharedPolitenessMiddleware": 960,
}
RETRY_HTTP_CODES = [500, 502, 503, 504, 522, 524, 408, 429]

FEED_EXPORT_ENCODING = "utf-8"
LOG_FORMATTER = "scrapy_frontier.observability.logformatter.LogFormatter"

# Logs and metrics (README "Logs and metrics"). Each is also read from the environment variable
# of the same name; -s wins over both.
LOG_JSON = os.environ.get("LOG_JSON", "False")
METRICS_ENABLED = os.environ.get("METRICS_ENABLED", "True")
METRICS_HOST = os.environ.get("METRICS_HOST", "127.0.0.1")
METRICS_PORT = os.environ.get("METRICS_PORT", "9410-9429")
EXTENSIONS = {
    # Scrapy's progress line, plus the cluster's figures in distributed mode.
    "scrapy.extensions.logstats.LogStats": None,
    "scrapy_frontier.observability.logstats.ClusterLogStats": 0,
    # Prometheus metrics, cluster totals in <spider>:stats, JSON logs.
    "scrapy_frontier.observability.extension.Observability": 0,
    # Startup objects out of the full garbage collections (scrapy_frontier/gcfreeze.py).
    "scrapy_frontier.gcfreeze.GcFreeze": 0,
}
