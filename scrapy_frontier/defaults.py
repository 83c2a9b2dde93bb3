"""Every setting scrapy-frontier adds, written once: name, default, type, bounds and meaning (as
scrapy-redis's ``defaults.py`` keeps its defaults in one place).

:func:`scrapy_frontier.config.read_setting` and :func:`~scrapy_frontier.config.read_value` take a
setting's type, bounds and default from :data:`TABLE`; the add-on (:mod:`scrapy_frontier.addon`)
puts :data:`SETTINGS` in a crawl's settings at Scrapy's ``default`` priority; the tables of
docs/settings.md are written from :data:`GROUPS`::

    python -m scrapy_frontier.defaults docs/settings.md

rewrites them in place (without an argument: prints them).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

from scrapy_frontier.keys import (
    CRAWLS_KEY,
    ITEMS_KEY,
    SCHEDULER_DUPEFILTER_KEY,
    SCHEDULER_QUEUE_KEY,
    START_URLS_KEY,
    STATS_KEY,
)


@dataclass(frozen=True)
class Setting:
    """One setting. ``kind`` is ``bool``, ``int``, ``float``, ``str``, ``dict``, or ``object``
    for a value used as given (a list, a class); ``default`` ``None`` means unset. ``minimum``
    (inclusive) and ``above`` (exclusive) bound a number: the reader refuses a value outside
    them. Checks that involve another setting stay with the component that reads it; the docs
    then say them in ``range_doc``."""

    name: str
    default: Any
    kind: type
    minimum: float | None = None
    above: float | None = None
    #: The meaning, in markdown (docs/settings.md's "meaning" column, without the range).
    doc: str = ""
    #: What the default stands for, when its value does not say it: "`0` = <default_doc>".
    default_doc: str = ""
    #: The type as the docs name it, when not ``kind``'s name.
    type_doc: str = ""
    #: The range as the docs show it, when the component checks more than ``minimum``/``above``.
    range_doc: str = ""
    #: Read from the environment variable of the same name when no settings source sets it
    #: (twelve-factor style: containers and scrapyd jobs are configured through it).
    env: bool = False


_CLUSTER_DOCS = "[operating.md](operating.md#past-one-redis-server-redis-cluster-and-sentinel)"

#: The settings by group, in docs/settings.md's order (its ``## `` headings).
GROUPS: dict[str, tuple[Setting, ...]] = {
    "Connections": (
        Setting(
            "REDIS_URL",
            None,
            str,
            env=True,
            doc="Redis of the shared crawl, `redis://[user:password@]host:6379/0` (password percent-encoded, "
            "[operating.md](operating.md#passwords-in-redis_url-and-mysql_url)); setting it turns on distributed "
            "mode (the add-on `scrapy_frontier.addon.DistributedAddon` then sets `SCHEDULER` and "
            "`DUPEFILTER_CLASS`). A database that is not a number is refused. Also a Redis Cluster node (or several, "
            "`redis://host:port,host:port`), "
            "`rediss://` (TLS) or `redis+sentinel://host:26379[,host:port]/<master>[/<db>]` "
            f"({_CLUSTER_DOCS})",
        ),
        Setting(
            "REDIS_PARAMS",
            {},
            dict,
            doc="extra `redis.Redis` arguments over the defaults: socket timeout 30 s, connect timeout 10 s, "
            "retry on timeout, health check every 30 s (`decode_responses`, `encoding` and `url` are ignored, "
            "`redis_cls` is refused)",
        ),
        Setting(
            "REDIS_CLUSTER",
            None,
            bool,
            default_doc="detected",
            doc="whether `REDIS_URL` names a Redis Cluster node (unset: `INFO cluster` tells, once per process); "
            f"the client is then redis-py's `RedisCluster` ({_CLUSTER_DOCS})",
        ),
        Setting(
            "MYSQL_URL",
            None,
            str,
            env=True,
            doc="`mysql://user:password@host:port/db` (password percent-encoded; also `mysql+pymysql://`, "
            "`mariadb://`; user `root` and port 3306 when left out); unset: SQLite. The database must exist; "
            "tables are created",
        ),
        Setting("SQLITE_PATH", "crawl.sqlite3", str, doc="SQLite file when `MYSQL_URL` is unset"),
    ),
    "Redis key names": (
        Setting(
            "SCHEDULER_QUEUE_KEY",
            SCHEDULER_QUEUE_KEY,
            str,
            doc="frontier key (and prefix of the per-host queues and of the failed-requests list)",
        ),
        Setting(
            "SCHEDULER_DUPEFILTER_KEY",
            SCHEDULER_DUPEFILTER_KEY,
            str,
            doc="dupefilter key (and prefix of its meta, Bloom and forgotten keys)",
        ),
        Setting("REDIS_START_URLS_KEY", START_URLS_KEY, str, doc="start-URL key"),
        Setting("REDIS_ITEMS_KEY", ITEMS_KEY, str, doc="prefix of the item keys (cache, invalid, pending, list)"),
        Setting("STATS_KEY", STATS_KEY, str, doc="the cluster totals' hash (scrapy-redis's name)"),
        Setting(
            "CRAWL_ID",
            "",
            str,
            doc="a second crawl of the same spider in the same Redis database: `%(spider)s` and `%(name)s` expand "
            "to `<spider>@<crawl id>`, and so do the keys named after the spider (`site@june:nodes`, ...). No "
            "`:`, `@`, `*`, `?`, `[`, `]`, `{`, `}`, `\\` or white space, at most 100 characters",
        ),
        Setting(
            "CRAWLS_KEY",
            CRAWLS_KEY,
            str,
            doc="set of the crawls of this Redis database that a worker joined and that were not cleared since "
            "(what `scrapy status` without a spider lists; the last worker of a finished crawl with "
            "`SCHEDULER_PERSIST=False` clears it and removes it)",
        ),
    ),
    "Scheduler and frontier": (
        Setting(
            "SCHEDULER_PERSIST",
            False,
            bool,
            doc="keep the frontier and dupefilter when the crawl finishes (else the last worker clears them)",
        ),
        Setting(
            "SCHEDULER_FLUSH_ON_START",
            False,
            bool,
            doc="a worker that starts the crawl (no other live worker registered) first clears its frontier, "
            "dupefilter and leases (the start URLs stay); a worker joining live workers clears nothing",
        ),
        Setting("REDIS_START_URLS_AS_SET", False, bool, doc="start URLs in a set (SADD) instead of a list (LPUSH)"),
        Setting("REDIS_START_URLS_BATCH_SIZE", 100, int, minimum=1, doc="start URLs taken per round trip"),
        Setting(
            "REDIS_ENCODING",
            "utf-8",
            str,
            doc="encoding of the start-URL payloads (a Python codec name); "
            "a payload that does not decode is refused (`not_utf8`, or `not_decodable` with another encoding)",
        ),
        Setting(
            "REDIS_START_URLS_MAX_BYTES",
            65_536,
            int,
            minimum=1,
            doc="larger start-URL payloads are refused (bytes); `scrapy push` and `scrapy forget` check it too",
        ),
        Setting(
            "MAX_IDLE_TIME_BEFORE_CLOSE",
            0.0,
            float,
            minimum=0,
            doc="seconds the whole crawl must be idle before a worker exits; 0 = never for a spider that waits for "
            "start URLs in Redis, else once the crawl is dry; never with `REVISIT_INTERVAL` "
            "([spiders.md](spiders.md#when-a-worker-closes))",
        ),
        Setting(
            "FRONTIER_PREFETCH",
            0,
            int,
            minimum=0,
            default_doc="`CONCURRENT_REQUESTS`",
            doc=(
                "requests a worker takes per batch (and holds at most, beyond those in flight; not counting "
                "those waiting for a send time AutoThrottle alone set, up to twice as many in all)"
            ),
        ),
        Setting(
            "FRONTIER_SHARDS",
            None,
            int,
            minimum=0,
            default_doc="none on a single Redis, 16 on a Redis Cluster",
            range_doc="0-16384",
            doc="frontier shards of a new crawl, each one hash slot (hosts spread by CRC-32); recorded with the "
            "crawl, and a worker set for another count refuses to start",
        ),
        Setting(
            "FRONTIER_WAIT_REPLICAS",
            None,
            int,
            minimum=0,
            default_doc="1 on a Redis Cluster whose masters have replicas, else 0",
            doc="replicas that must have a page's children pushed to other shards (`WAIT`) before its lease is "
            f"acknowledged; a failover then cannot lose them ({_CLUSTER_DOCS})",
        ),
        Setting(
            "FRONTIER_WAIT_TIMEOUT",
            1.0,
            float,
            above=0,
            doc="seconds a `WAIT` may take; a shorter answer is counted (`frontier/replica_wait_short`) and the "
            "acknowledgement sent anyway",
        ),
        Setting("FRONTIER_HEARTBEAT_INTERVAL", 5.0, float, above=0, doc="seconds between heartbeats"),
        Setting(
            "FRONTIER_NODE_TIMEOUT",
            0.0,
            float,
            minimum=0,
            default_doc="6 x heartbeat",
            range_doc=">= 2 x heartbeat",
            doc="a worker silent this long (seconds) is dead and its leases go back to the frontier",
        ),
        Setting(
            "FRONTIER_POLL_MAX", 1.0, float, above=0, doc="longest wait (seconds) between polls of an empty frontier"
        ),
        Setting(
            "FRONTIER_LOCAL_SEEN",
            200_000,
            int,
            minimum=0,
            doc="fingerprints a worker remembers of what it and (from the seen feed, "
            "[dedup.md](dedup.md#one-round-trip-per-batch)) the other workers queued, to skip duplicates before "
            "Redis (cleared when full, and after a Redis outage; off on a Redis Cluster or Sentinel, where a "
            "failover can lose recent pushes unseen)",
        ),
    ),
    # The dupefilter's bounds are checked by scrapy_frontier.dupefilter.DedupConfig, which also
    # checks a crawl's recorded layout; the capacities are read as floats so that 1e7 is accepted.
    "Dupefilter": (
        Setting(
            "DUPEFILTER_MODE",
            "exact",
            str,
            doc="`exact`: 64-bit fingerprints packed in intset buckets (about 9.4 bytes of Redis per URL; a crawl "
            "with a scrapy-redis hex set keeps it); `set`: scrapy-redis's set of hex fingerprints (about 90 bytes "
            "per URL); `bloom`: a scalable Bloom filter (about 3.8 bytes per URL at 1e-6) ([dedup.md](dedup.md))",
        ),
        Setting(
            "DUPEFILTER_CAPACITY",
            10_000_000,
            float,
            type_doc="int",
            range_doc="1-2**40",
            doc="URLs the packed exact layout of a new crawl is sized for (`/ 256` buckets, recorded with the "
            "crawl); past twice that, memory per URL grows",
        ),
        Setting(
            "DUPEFILTER_BLOOM_CAPACITY",
            10_000_000,
            float,
            type_doc="int",
            range_doc="1 to 2**40",
            doc="URLs the first Bloom filter holds (its bits are allocated at once: 37.7 MB at the default rate); "
            "each further filter holds twice as many as the one before",
        ),
        Setting(
            "DUPEFILTER_BLOOM_ERROR_RATE",
            1e-6,
            float,
            range_doc="between 0 and 1",
            doc="false-positive rate of the whole Bloom chain: a new URL wrongly taken as seen, and never crawled",
        ),
        Setting(
            "DUPEFILTER_RECRAWL_AGE",
            0.0,
            float,
            range_doc=">= 0",
            doc="exact mode only: seconds after which a seen URL is queued again when found; 0 = never",
        ),
    ),
    "Revisits": (
        Setting(
            "REVISIT_INTERVAL",
            0.0,
            float,
            minimum=0,
            default_doc="no revisits: the crawl ends when its frontier is dry",
            range_doc="0, or from `REVISIT_MIN_INTERVAL` to `REVISIT_MAX_INTERVAL`",
            doc="seconds after which a page fetched with a 200 is fetched again (a conditional GET), the "
            "interval then adapting to how often the page changes; the crawl never ends by itself "
            "([revisits.md](revisits.md))",
        ),
        Setting(
            "REVISIT_MIN_INTERVAL",
            60.0,
            float,
            above=0,
            range_doc="> 0, at most `REVISIT_MAX_INTERVAL`",
            doc="shortest revisit interval (seconds), however often a page changes",
        ),
        Setting(
            "REVISIT_MAX_INTERVAL",
            31_536_000.0,
            float,
            above=0,
            range_doc="> 0",
            doc="longest revisit interval (seconds; 365 days), however long a page stays the same",
        ),
    ),
    "Item pipelines": (
        Setting("VALIDATION_ENABLED", True, bool, doc="the validation pipeline"),
        Setting("DEAD_LETTER_DIR", ".", str, doc="directory of the dead-letter JSON-lines files in embedded mode"),
        Setting("REDIS_CACHE_ENABLED", True, bool, doc="the Redis cache pipeline (distributed mode only)"),
        Setting(
            "REDIS_CACHE_TTL",
            7 * 24 * 3600,
            int,
            minimum=0,
            doc="seconds a cached item lives (lean cache: its bucket, after its last write); 0 = forever",
        ),
        Setting(
            "REDIS_CACHE_ITEMS",
            False,
            bool,
            doc="keep the whole latest version of each item in the cache (about 2.5 KB a page), not only the "
            "marker the unchanged skip needs (about 27 bytes); `scrapy forget --pattern` needs it "
            "([items.md](items.md))",
        ),
        Setting(
            "REDIS_CACHE_CAPACITY",
            10_000_000,
            int,
            minimum=1,
            doc="items the lean cache is sized for: `REDIS_CACHE_CAPACITY / 64` buckets",
        ),
        Setting("REDIS_ITEMS_LIST", False, bool, doc="also append every item to `<spider>:items`"),
        Setting("STORAGE_ENABLED", True, bool, doc="the storage pipeline"),
        Setting(
            "STORAGE_ITEM_TYPES",
            None,
            object,
            type_doc="list of str (comma-separated with `-s`)",
            default_doc="the project's items module (package of the first `SPIDER_MODULES` entry + `.items`), "
            "if it exists and imports (a WARNING line otherwise)",
            doc="import paths of the modules and classes whose item types are declared: their schemas are checked "
            "at start, and replay rebuilds only them (and documents). Empty: none declared",
        ),
        Setting(
            "STORAGE_DOCUMENT_KEY",
            None,
            str,
            doc="field that keys an item without a schema in the `items` table (e.g. `url`); unset, or absent "
            "from an item (or `None`, or empty): the item is keyed by a hash of its content",
        ),
        Setting("STORAGE_BATCH_SIZE", 200, int, minimum=1, doc="items per database write"),
        Setting(
            "STORAGE_FLUSH_INTERVAL",
            0.0,
            float,
            minimum=0,
            doc="seconds the first item of a batch waits for others; 0 = group commit: a batch is written as soon "
            "as the writer is free, with every item that arrived while the one before was written",
        ),
        Setting(
            "STORAGE_RETRY_TIMEOUT",
            60.0,
            float,
            minimum=0,
            doc="seconds to retry a lost database before the batch goes to `<spider>:items:pending`",
        ),
    ),
    "Politeness and retries": (
        Setting(
            "POLITENESS_ENABLED",
            True,
            bool,
            doc="shared politeness: sends held to the times booked for them, AutoThrottle for the whole crawl, "
            "429/503 slow-downs; "
            "the frontier still serves hosts in turn",
        ),
        Setting(
            "DOMAIN_RATE_LIMIT",
            None,
            float,
            minimum=0,
            default_doc="`1 / DOWNLOAD_DELAY` when Scrapy's `DOWNLOAD_DELAY` is set (the add-on moves it here, "
            "logged: the delay holds for the whole crawl, not per worker; with this setting set, `DOWNLOAD_DELAY` "
            "stays per worker), else no limit",
            doc="requests/second per host for the whole crawl; 0 = no limit",
        ),
        Setting(
            "DOMAIN_RATE_LIMITS",
            {},
            dict,
            doc='per-host rates (`{"host": rate}`, rates >= 0), copied into `<spider>:rates` where none is set yet',
        ),
        Setting(
            "DOMAIN_CONCURRENCY",
            None,
            int,
            minimum=0,
            default_doc="`CONCURRENT_REQUESTS_PER_DOMAIN` (Scrapy's, 8): the whole crawl sends a host no more at "
            "once than one worker would",
            doc="requests in flight per host across the cluster (taken from the frontier and not finished); 0 = no cap",
        ),
        Setting(
            "POLITENESS_REFRESH",
            2.0,
            float,
            above=0,
            doc="seconds between re-reads of the live rates (slow-downs, pauses and Crawl-delays reach every "
            "worker at once, by pub/sub)",
        ),
        Setting(
            "POLITENESS_MIN_FACTOR",
            0.05,
            float,
            above=0,
            doc="the lowest a host's rate falls after 429/503s, as a fraction",
        ),
        Setting(
            "POLITENESS_RECOVERY_STEP",
            0.1,
            float,
            above=0,
            doc="fraction of the rate regained per successful response",
        ),
        Setting(
            "POLITENESS_BASE_RATE",
            10.0,
            float,
            above=0,
            doc="requests/second given to a host without a rate on its first 429/503",
        ),
        Setting(
            "COOKIES_SHARED",
            True,
            bool,
            doc="one cookie jar per `cookiejar` meta key for the whole crawl, in Redis (`<spider>:cookies`): a "
            "cookie a response sets is sent by every worker (a login, a page that sets a cookie and redirects); "
            "off: each worker its own jar, as Scrapy's `CookiesMiddleware`",
        ),
        Setting("ROBOTSTXT_CACHE_TTL", 86_400, int, minimum=1, doc="seconds a robots.txt stays in the shared cache"),
        Setting(
            "ROBOTSTXT_RETRY_DELAY",
            60.0,
            float,
            above=0,
            doc="seconds before a robots.txt that could not be fetched (5xx, network error) is tried again, "
            "doubling with each failure; the host's pages wait meanwhile",
        ),
        Setting(
            "ROBOTSTXT_RETRY_DELAY_MAX",
            3600.0,
            float,
            above=0,
            doc="the longest wait between two tries of a robots.txt that could not be fetched (seconds)",
        ),
        Setting(
            "ROBOTSTXT_UNREACHABLE_LIMIT",
            2_592_000,
            int,
            minimum=0,
            doc="seconds (30 days) after which a robots.txt still not fetched counts as absent: no rules "
            "(RFC 9309, 2.3.1.4)",
        ),
        Setting(
            "RETRY_BACKOFF_BASE",
            1.0,
            float,
            minimum=0,
            doc="first retry delay (seconds); doubles per attempt, with jitter",
        ),
        Setting("RETRY_BACKOFF_MAX", 60.0, float, minimum=0, doc="longest retry delay (seconds)"),
        Setting(
            "RETRY_AFTER_MAX",
            300.0,
            float,
            minimum=0,
            doc="longest `Retry-After` obeyed (seconds); longer ones are capped",
        ),
    ),
    "Logs, metrics and memory": (
        Setting("LOG_JSON", False, bool, env=True, doc="every log line is one JSON object"),
        Setting("METRICS_ENABLED", True, bool, env=True, doc="serve Prometheus metrics over HTTP"),
        Setting(
            "METRICS_HOST",
            "127.0.0.1",
            str,
            env=True,
            doc="address the metrics server binds (`0.0.0.0`: every interface, as in containers)",
        ),
        # Parsed by scrapy_frontier.observability.server.parse_ports.
        Setting(
            "METRICS_PORT",
            "9410-9429",
            str,
            env=True,
            type_doc="int or range",
            doc="port of `/metrics`, or a range tried in order (workers on one host take the next free one); "
            "0 = any free port",
        ),
        Setting(
            "METRICS_REFRESH_INTERVAL",
            5.0,
            float,
            above=0,
            doc="seconds between a worker's Redis refreshes of the gauges and pushes of its counts to `<spider>:stats`",
        ),
        Setting(
            "CLUSTER_LOGSTATS_ENABLED",
            True,
            bool,
            doc="the progress line adds the whole crawl's figures (distributed mode); off: Scrapy's line for this "
            "worker",
        ),
        Setting(
            "GC_FREEZE_ENABLED",
            True,
            bool,
            doc="once the spider is open, move every object alive to Python's permanent GC generation, out of the "
            "full collections ([bench/README.md](../bench/README.md#what-storage-on-costs-a-worker))",
        ),
    ),
}

#: Every setting by name.
TABLE: dict[str, Setting] = {s.name: s for group in GROUPS.values() for s in group}

#: Every setting scrapy-frontier adds, with its default.
SETTINGS: dict[str, Any] = {name: s.default for name, s in TABLE.items()}

#: Settings that, when no settings source sets them, are read from the environment variable of the
#: same name.
FROM_ENVIRONMENT: tuple[str, ...] = tuple(name for name, s in TABLE.items() if s.env)


# docs/settings.md


def _shown(value: Any) -> str:
    """``value`` as the docs write it: ``1`` for 1.0, ``1e-6`` for 1e-06."""
    if isinstance(value, str):
        return value
    text = repr(value)
    if isinstance(value, float):
        text = re.sub(r"\.0$", "", text)
        text = re.sub(r"e([+-])0*(\d)", r"e\1\2", text).replace("e+", "e")
    return text


def _default_text(s: Setting) -> str:
    text = "unset" if s.default is None else "empty" if s.default == "" else f"`{_shown(s.default)}`"
    if s.default_doc:
        text += f" = {s.default_doc}"
    return f"env `{s.name}`, else {text}" if s.env else text


def _range_text(s: Setting) -> str:
    if s.range_doc:
        return f" [{s.range_doc}]"
    bounds = [f">= {_shown(s.minimum)}"] if s.minimum is not None else []
    bounds += [f"> {_shown(s.above)}"] if s.above is not None else []
    return f" [{', '.join(bounds)}]" if bounds else ""


def settings_markdown(group: str) -> str:
    """The markdown table of ``group`` (a key of :data:`GROUPS`): setting, type, default, meaning
    (with its range in brackets)."""
    rows = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    for s in GROUPS[group]:
        kind = s.type_doc or s.kind.__name__
        rows.append(f"| `{s.name}` | {kind} | {_default_text(s)} | {s.doc}{_range_text(s)} |")
    return "\n".join(rows)


#: A generated table in docs/settings.md: its group's name in the first marker.
_GENERATED = re.compile(
    r'(?P<begin><!-- BEGIN settings table "(?P<group>[^"]+)"[^\n]*-->\n)'
    r"(?P<table>.*?)"
    r"(?P<end><!-- END settings table -->)",
    re.DOTALL,
)


def settings_doc(text: str) -> str:
    """``text`` (docs/settings.md) with the table between each pair of markers written anew from
    :data:`GROUPS`; the rest, hand-written, as it is. Raises ValueError when a marker names no
    group, or a group has no table or two."""
    seen: list[str] = []

    def table(match: re.Match[str]) -> str:
        group = match["group"]
        if group not in GROUPS:
            raise ValueError(f"docs/settings.md: no settings group {group!r} (groups: {', '.join(GROUPS)})")
        seen.append(group)
        return f"{match['begin']}\n{settings_markdown(group)}\n\n{match['end']}"

    written = _GENERATED.sub(table, text)
    missing = [g for g in GROUPS if seen.count(g) != 1]
    if missing:
        raise ValueError(f"docs/settings.md: groups without exactly one table: {', '.join(missing)}")
    return written


def main(argv: list[str]) -> int:
    """``python -m scrapy_frontier.defaults [FILE ...]``: the settings tables on standard output,
    or written into each FILE between its markers (docs/settings.md). Returns the exit status."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m scrapy_frontier.defaults",
        description="Print the settings tables (markdown), or write them into FILE between its "
        "<!-- BEGIN settings table ... --> and <!-- END settings table --> markers.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="e.g. docs/settings.md")
    paths = parser.parse_args(argv).files
    if not paths:
        for group in GROUPS:
            print(f"## {group}\n\n{settings_markdown(group)}\n")
        return 0
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            written = settings_doc(text)
        except (OSError, ValueError) as exc:
            print(f"error: {path}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
        if written != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(written)
        print(f"{path}: {'written' if written != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
