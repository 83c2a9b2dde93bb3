"""Scrapy extensions of this project (enabled in ``crawler/settings.py``, EXTENSIONS):

- :class:`scrapy_frontier.observability.extension.Observability`: Prometheus metrics over HTTP, the
  cluster-wide totals in ``<spider>:stats``, JSON logs outside ``scrapy crawl``;
- :class:`scrapy_frontier.observability.logstats.ClusterLogStats`: Scrapy's progress line plus the
  cluster's figures in distributed mode.
"""
