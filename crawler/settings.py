"""This project's settings: its own values only. The wiring (scheduler, pipelines, middlewares,
extensions, log formatter) comes from the scrapy-frontier add-on, as in any project that lists
it; docs/settings.md documents every setting it adds.

Scrapy settings reference: https://docs.scrapy.org/en/latest/topics/settings.html
"""

from scrapy.settings import default_settings

BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
# scrapy-frontier's commands (status, push, requeue, replay, forget); in another project the add-on's
# package registers them through the scrapy.commands entry point.
COMMANDS_MODULE = "scrapy_frontier.commands"

# Distributed mode is on when REDIS_URL is set (here, with -s, or in the environment); items go
# to MySQL when MYSQL_URL is set (same sources), to an SQLite file otherwise.
ADDONS = {"scrapy_frontier.addon.DistributedAddon": 0}

ROBOTSTXT_OBEY = True
# Scrapy 2.7's request fingerprints where Scrapy still defaults to 2.6's with a deprecation warning
# (2.11), as its own project template then set them; from 2.12 they are the only ones and the
# setting itself is deprecated.
if getattr(default_settings, "REQUEST_FINGERPRINTER_IMPLEMENTATION", None) == "2.6":
    REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
# Scrapy's telnet console logs the password it generates at start: no secret in a worker's log.
# A worker to inspect by hand: -s TELNETCONSOLE_ENABLED=True -s TELNETCONSOLE_PASSWORD=...
TELNETCONSOLE_ENABLED = False
USER_AGENT = "crawler (+https://github.com/)"
CONCURRENT_REQUESTS = 32
CONCURRENT_REQUESTS_PER_DOMAIN = 8
# Scrapy 2.19's scraper starts CONCURRENT_ITEMS tasks for every response, whatever its callback
# yields (scrapy/utils/asyncio.py, _parallel_asyncio), and keeps them until the response's last
# item is through the pipelines: at Scrapy's 100, creating them is a large share of a worker's CPU
# and the tasks of responses waiting for their items' commit make every garbage collection slower.
# 16 items (or requests) of one response still go through at once.
CONCURRENT_ITEMS = 16
DOWNLOAD_TIMEOUT = 30
# Scrapy's 1 GiB limit lets one page take a worker's memory: parsing an HTML body costs several
# times its size (lxml's tree, the decoded text, the page's text and links). An HTML page over
# 8 MiB is almost always an error or a trap; it is cancelled as soon as its size is known (or
# reached, without Content-Length) and kept as a dead letter. 4 MiB logs a warning (the Python
# docs' contents.html is 2.5 MB: real pages pass 2 MiB).
DOWNLOAD_MAXSIZE = 8 * 1024 * 1024
DOWNLOAD_WARNSIZE = 4 * 1024 * 1024
# Per-domain throttling: AutoThrottle adapts the delay to each domain's latency.
AUTOTHROTTLE_ENABLED = True
AUTOTHROTTLE_START_DELAY = 0.5
AUTOTHROTTLE_MAX_DELAY = 30.0
AUTOTHROTTLE_TARGET_CONCURRENCY = 4.0

FEED_EXPORT_ENCODING = "utf-8"

# How the site spider makes a page's text: "trafilatura" (documentation pages by the project's
# rule, other pages by trafilatura) or "rule" (the project's rule for every page: faster, but
# menus and sidebars of ordinary pages in the text). docs/items.md#text-and-headings.
PAGE_TEXT_EXTRACTOR = "trafilatura"
