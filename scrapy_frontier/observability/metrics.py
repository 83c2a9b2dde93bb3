"""The Prometheus metrics a worker exposes (prometheus-client), defined once.

:data:`METRIC_NAMES` lists the exposed family names, the ones to use in PromQL and dashboards
(a histogram family ``X`` is scraped as ``X_bucket``, ``X_sum`` and ``X_count``). :class:`Metrics`
builds them all in a registry of their own, one per crawler, so that two crawlers in one process
never clash; the extension
``scrapy_frontier.observability.extension.Observability`` fills them and serves them over HTTP
(:mod:`scrapy_frontier.observability.server`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.metrics import MetricWrapperBase


@dataclass(frozen=True)
class MetricSpec:
    """One metric: exposed ``name``, prometheus-client ``kind``, ``labels``, ``help`` text."""

    name: str
    kind: type[MetricWrapperBase]
    labels: tuple[str, ...]
    help: str


#: Download latency buckets, seconds (Scrapy's download_latency: request sent to headers received).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: Every metric, in exposition order.
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("crawler_pages_total", Counter, ("spider",), "Responses received by this worker."),
    MetricSpec(
        "crawler_responses_total",
        Counter,
        ("spider", "status"),
        "Responses received by this worker, by HTTP status code.",
    ),
    MetricSpec(
        "crawler_items_stored_total",
        Counter,
        ("spider",),
        "Items committed to the database by this worker's storage pipeline.",
    ),
    MetricSpec(
        "crawler_items_dropped_total",
        Counter,
        ("spider", "reason"),
        "Items dropped by a pipeline of this worker, by reason (validation reason or exception class).",
    ),
    MetricSpec(
        "crawler_retries_total",
        Counter,
        ("spider", "reason"),
        "Requests this worker rescheduled for a retry, by reason.",
    ),
    MetricSpec(
        "crawler_download_latency_seconds",
        Histogram,
        ("spider",),
        "Download latency of this worker's responses, seconds (request sent to response headers).",
    ),
    MetricSpec(
        "crawler_frontier_depth",
        Gauge,
        ("spider",),
        "Requests queued in the shared frontier, cluster-wide (distributed mode).",
    ),
    MetricSpec(
        "crawler_leases_inflight",
        Gauge,
        ("spider",),
        "Requests this worker has leased from the frontier and not yet acknowledged (distributed mode).",
    ),
    MetricSpec(
        "crawler_dead_letters",
        Gauge,
        ("spider", "kind"),
        "Length of a dead-letter list, kind = requests, start_urls or items (distributed mode).",
    ),
    MetricSpec(
        "crawler_throttled_hosts",
        Gauge,
        ("spider",),
        "Hosts under a rate limit, a pause or a robots.txt Crawl-delay, cluster-wide (distributed mode).",
    ),
    MetricSpec(
        "crawler_host_in_flight",
        Gauge,
        ("spider", "host"),
        "Requests in flight to a busy host across the crawl (the 10 busiest; distributed mode).",
    ),
    MetricSpec(
        "crawler_host_delay_seconds",
        Gauge,
        ("spider", "host"),
        "Seconds between two requests to a busy host, from its strictest rule (0: none; distributed mode).",
    ),
    MetricSpec(
        "crawler_host_latency_seconds",
        Gauge,
        ("spider", "host"),
        "Download latency of a busy host's last response, as the shared AutoThrottle saw it (distributed mode).",
    ),
    MetricSpec(
        "crawler_host_held_back",
        Gauge,
        ("spider", "host", "reason"),
        "1 for each rule that holds a busy host back: rate, Crawl-delay, AutoThrottle, slowed down, paused, "
        "concurrency cap (distributed mode).",
    ),
    MetricSpec(
        "crawler_revisits_scheduled",
        Gauge,
        ("spider",),
        "Pages in the revisit schedule, cluster-wide (REVISIT_INTERVAL; distributed mode).",
    ),
    MetricSpec(
        "crawler_revisits_due",
        Gauge,
        ("spider",),
        "Scheduled pages due now and not yet queued, cluster-wide (distributed mode).",
    ),
    MetricSpec(
        "crawler_revisits_overdue_seconds",
        Gauge,
        ("spider",),
        "Seconds the earliest page due and not yet queued has waited (0: none; distributed mode).",
    ),
    MetricSpec(
        "crawler_revisits_total",
        Counter,
        ("spider", "result"),
        "Revisits this worker fetched, by result: changed, unchanged (a 304 included), not_modified (304).",
    ),
    MetricSpec(
        "crawler_politeness_wait_seconds_total",
        Counter,
        ("spider",),
        "Seconds this worker's requests waited for their host's shared send time.",
    ),
)

#: The exposed metric family names (what deploy/ checks and the Grafana dashboard query).
METRIC_NAMES: tuple[str, ...] = tuple(spec.name for spec in METRICS)


class Metrics:
    """All of :data:`METRICS` in a fresh :class:`~prometheus_client.CollectorRegistry`.

    Attributes are named after the metric without the ``crawler_`` prefix and the ``_total``
    suffix (``pages``, ``responses``, ``items_stored``, ``items_dropped``, ``retries``,
    ``download_latency_seconds``, ``frontier_depth``, ``leases_inflight``, ``dead_letters``,
    ``throttled_hosts``, ``host_in_flight``, ``host_delay_seconds``, ``host_latency_seconds``,
    ``host_held_back``, ``revisits_scheduled``, ``revisits_due``, ``revisits_overdue_seconds``,
    ``revisits``, ``politeness_wait_seconds``); each is the labelled parent metric.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # No ``*_created`` series (prometheus-client's process-wide switch): they double the
        # exposition and no query here uses them.
        disable_created_metrics()
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        for spec in METRICS:
            kwargs: dict[str, Any] = {"buckets": LATENCY_BUCKETS} if spec.kind is Histogram else {}
            metric = spec.kind(spec.name, spec.help, spec.labels, registry=self.registry, **kwargs)
            setattr(self, attribute_name(spec.name), metric)

    # Declared for type checkers and readers; set in __init__.
    pages: Counter
    responses: Counter
    items_stored: Counter
    items_dropped: Counter
    retries: Counter
    download_latency_seconds: Histogram
    frontier_depth: Gauge
    leases_inflight: Gauge
    dead_letters: Gauge
    throttled_hosts: Gauge
    host_in_flight: Gauge
    host_delay_seconds: Gauge
    host_latency_seconds: Gauge
    host_held_back: Gauge
    revisits_scheduled: Gauge
    revisits_due: Gauge
    revisits_overdue_seconds: Gauge
    revisits: Counter
    politeness_wait_seconds: Counter


def drop_reason(exception: BaseException) -> str:
    """The ``reason`` label of ``crawler_items_dropped_total`` for an item dropped with
    ``exception``: its ``reason`` attribute when that is a string (a short stat word, such as
    ``missing`` or ``too_long`` from validation); else, from the message of a ``DropItem`` that
    carries none, the validation reason or ``storage_refused``; else the exception's class name."""
    reason = getattr(exception, "reason", None)
    if isinstance(reason, str):
        return reason
    text = str(exception)
    match = re.match(r"invalid field .*? \((\w+)\):", text)
    if match:
        return match.group(1)
    if text.startswith("the database refused it"):
        return "storage_refused"
    return type(exception).__name__


def attribute_name(metric_name: str) -> str:
    """``crawler_pages_total`` -> ``pages``: the :class:`Metrics` attribute of a metric."""
    name = metric_name.removeprefix("crawler_")
    return name.removesuffix("_total")
