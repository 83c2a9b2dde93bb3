"""Scrapy extensions of this project (enabled in ``crawler/settings.py``, EXTENSIONS):

- :class:`scrapy_frontier.observability.extension.Observability`: Prometheus metrics over HTTP, the
  cluster-wide totals in ``<spider>:stats``, JSON logs outside ``scrapy crawl``;
- :class:`scrapy_frontier.observability.logstats.ClusterLogStats`: Scrapy's progress line plus the
  cluster's figures in distributed mode.

Their parts: :mod:`~scrapy_frontier.observability.metrics` (the metrics, defined once),
:mod:`~scrapy_frontier.observability.server` (the metrics HTTP server, ``METRICS_PORT``),
:mod:`~scrapy_frontier.observability.totals` (the cluster totals and the Redis gauges),
:mod:`~scrapy_frontier.observability.logjson` and
:mod:`~scrapy_frontier.observability.logformatter` (the logs).
"""
