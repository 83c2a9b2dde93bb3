"""scrapy-frontier: distributed Scrapy crawls through Redis.

Listed in a project's ``ADDONS`` (``{"scrapy_frontier.addon.DistributedAddon": 0}``), the
add-on turns every spider of the project into a worker of a shared crawl when ``REDIS_URL`` is
set: a shared frontier with leases (no request lost when a worker dies), a shared dupefilter,
politeness shared by every worker, and items validated, cached in Redis and written through to
MySQL. See README.md.
"""

__version__ = "0.2.0"
