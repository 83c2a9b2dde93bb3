"""Every Redis key this project writes, in one place (as scrapy-redis's ``defaults.py``).

Templates take ``%(spider)s``; the scrapy-redis names (``<spider>:requests``,
``<spider>:dupefilter``, ``<spider>:start_urls``, ``<spider>:items``, ``<spider>:stats``) and
their settings (``SCHEDULER_QUEUE_KEY``, ``SCHEDULER_DUPEFILTER_KEY``, ``REDIS_START_URLS_KEY``,
``REDIS_ITEMS_KEY``, ``STATS_KEY``) are kept so a scrapy-redis user finds the same keys in ``redis-cli``.
"""

from __future__ import annotations

import functools
import weakref
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: The frontier: the index of hosts that have requests, ``<spider>:requests`` (a sorted set,
#: score = when the host may next be served, Unix ms); per host, a list of requests per
#: priority, ``<spider>:requests:<host>#<score>`` (score = -priority), and
#: ``<spider>:requests:<host>``, a sorted set of its priorities other than 0 (member = score;
#: ``lua/lib/frontier_queue.lua``).
SCHEDULER_QUEUE_KEY = "%(spider)s:requests"
#: Fingerprints of every request ever enqueued (hex SHA-1 from the crawler's request fingerprinter).
SCHEDULER_DUPEFILTER_KEY = "%(spider)s:dupefilter"
#: Start URLs pushed by users: a list (``lpush``) or, with REDIS_START_URLS_AS_SET, a set.
START_URLS_KEY = "%(name)s:start_urls"
#: Optional copy of every stored item (scrapy-redis's RedisPipeline list).
ITEMS_KEY = "%(spider)s:items"
#: Every crawl that has run on this Redis database (a set of crawl names, ``<spider>`` or
#: ``<spider>@<CRAWL_ID>``): what ``scrapy status`` without a spider lists. Workers add their
#: crawl when they join; the last worker of a finished crawl that clears it removes it.
CRAWLS_KEY = "scrapy-frontier:crawls"
#: Cluster-wide totals (scrapy-redis's STATS_KEY): a hash of counters every worker adds its deltas to.
STATS_KEY = "%(spider)s:stats"
#: Field prefix, in a lease hash, of a raw start URL taken from the start URLs: the field is
#: ``start:<raw payload>`` and its value a tab (no score, no host).
START_LEASE_PREFIX = "start:"


#: Characters a CRAWL_ID cannot have: key separators, glob characters (``scrapy status`` and
#: ``SCAN`` match keys with them), Redis Cluster hash-tag braces, and white space.
_BAD_CRAWL_ID = frozenset(":*?[]{}@\\") | frozenset(" \t\r\n")


def crawl_id_error(crawl_id: str) -> str | None:
    """Why ``crawl_id`` cannot be a ``CRAWL_ID``, or ``None`` when it can."""
    bad = sorted(set(crawl_id) & _BAD_CRAWL_ID)
    if bad or len(crawl_id) > 100:
        shown = " ".join(sorted(_BAD_CRAWL_ID - set(" \t\r\n")))
        return f"CRAWL_ID={crawl_id!r} cannot be used: at most 100 characters, none of {shown} or white space"
    return None


def crawl_name(spider_name: str, crawl_id: str = "") -> str:
    """The name a crawl's keys start with: the spider's name, or ``<spider>@<crawl id>`` with the
    ``CRAWL_ID`` setting, so that two crawls of one spider share a Redis database without
    touching each other's keys (the scheduler and the commands refuse a bad id first, with
    :func:`crawl_id_error`)."""
    crawl_id = (crawl_id or "").strip()
    return f"{spider_name}@{crawl_id}" if crawl_id else spider_name


def queue_host(hostname: str | None) -> str:
    """The host whose queue holds a URL of ``hostname`` (``urlparse(url).hostname``): the host in
    lower case, and ``failed`` as ``failed.`` (the same host in DNS), so that
    ``<spider>:requests:failed`` stays the dead-letter list."""
    host = (hostname or "").lower()
    return host + "." if host == "failed" else host


def hash_tag(key: str) -> str | None:
    """The Redis Cluster hash tag of ``key`` (the text between its first ``{`` and the next
    ``}``, when not empty), or ``None``: the key's slot is then the CRC16 of the whole key
    (Redis Cluster specification, "Hash tags")."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1 : end] if end > start + 1 else None


def colocated(key: str, suffix: str, tagged: bool) -> str:
    """A key named ``<key>:<suffix>`` that lives in ``key``'s hash slot: with ``tagged``, and
    ``key`` without a hash tag of its own, ``<key>:{<key>}:<suffix>``; else ``<key>:<suffix>``
    (which keeps ``key``'s own tag). A script can then touch both on a Redis Cluster."""
    if tagged and hash_tag(key) is None:
        return f"{key}:{{{key}}}:{suffix}"
    return f"{key}:{suffix}"


def shard_of_host(host: str, shards: int) -> int:
    """The frontier shard of ``host``: CRC-32 of the host name modulo ``shards`` (0 when the
    crawl is not sharded). Every worker computes the same, whatever its platform."""
    return zlib.crc32(host.encode("utf-8", "surrogateescape")) % shards if shards > 1 else 0


@dataclass(frozen=True)
class Shard:
    """The keys of one frontier shard: everything a lease, push or politeness script touches
    for the hosts of the shard, in one Redis Cluster hash slot (every name carries the shard's
    hash tag ``{<crawl>/<i>}``), or, in the crawl's unsharded layout on a single Redis, the
    scrapy-redis-style names (``<spider>:requests``, ``<spider>:dupefilter``...)."""

    index: int
    #: Sorted set of the shard's hosts that have queued requests, score = when the host may next
    #: be served (Unix ms, Redis time).
    queue: str
    #: The shard's dupefilter (layouts: :mod:`scrapy_frontier.dupefilter`).
    dupefilter: str
    #: Prefix of the nodes' lease hashes in this shard (+ node id).
    lease_prefix: str
    #: Prefix of the per-host politeness hashes (+ host; fields: :attr:`Keys.politeness_prefix`).
    politeness_prefix: str
    #: The live rates the scripts read: the crawl's ``<spider>:rates`` itself when unsharded,
    #: else a copy in the shard's slot that workers keep in step with it.
    rates: str

    @property
    def queue_prefix(self) -> str:
        """Prefix of the per-host request queues: + host."""
        return self.queue + ":"

    @property
    def forgotten(self) -> str:
        return self.dupefilter + ":forgotten"

    @property
    def bloom(self) -> str:
        return self.dupefilter + ":bloom"

    @property
    def epoch(self) -> str:
        """The crawl's epoch, copied into the shard's hash slot (a sharded crawl): gone or changed,
        the master that holds the shard lost its data while the rest of the crawl's keys stayed."""
        return self.dupefilter + ":epoch"

    @property
    def seen_feed(self) -> str:
        """Stream of the fingerprints the shard's dupefilter took in lately, one entry per push
        call (``lua/frontier_push.lua``), read by every node's lease calls: a node's local
        first look learns what the others queued."""
        return self.dupefilter + ":feed"

    @property
    def bloom_bits_prefix(self) -> str:
        return self.bloom + ":"

    @property
    def limited(self) -> str:
        """Hosts of the shard that need a send-time check (:attr:`Keys.limited`)."""
        return self.politeness_prefix + "@limited"

    @property
    def next_send(self) -> str:
        """Hash of the shard's hosts with a rate: host -> when it may next send (Unix ms, Redis
        time; :attr:`Keys.politeness_prefix`)."""
        return self.politeness_prefix + "@next"

    @property
    def at_delay(self) -> str:
        """Hash of the shard's hosts: host -> the shared AutoThrottle's delay (µs, an integer;
        :attr:`Keys.politeness_prefix`)."""
        return self.politeness_prefix + "@at_delay"

    @property
    def latency(self) -> str:
        """Hash of the shard's hosts: host -> the download latency of its last response a worker
        reported to the shared AutoThrottle (µs, as the worker sent it: ``-1 - latency`` for a
        response that is not a 200)."""
        return self.politeness_prefix + "@latency"

    @property
    def inflight(self) -> str:
        """Hash of the shard's hosts with leases in flight: host -> how many, across the cluster
        (absent: none), held under ``DOMAIN_CONCURRENCY`` by the lease script, which reads
        every host of a call in one ``HMGET``."""
        return self.politeness_prefix + "@inflight"

    @property
    def ranked(self) -> str:
        """Set of the shard's hosts whose queue has priorities other than 0 (a sorted set of
        them, ``lua/lib/frontier_queue.lua``): a host not in it is served from its priority-0 list
        with no look at the sorted set."""
        return self.queue_prefix + "@ranked"

    @property
    def revisit(self) -> str:
        """The prefix of the shard's revisit schedule (``REVISIT_INTERVAL``; its layout:
        ``lua/lib/revisit_wheel.lua`` and docs/revisits.md): ``<prefix>wheel`` (sorted set of
        parts by due time), ``<prefix>meta`` (hash of counts), ``<prefix>templates`` (hash),
        ``<prefix>b:<part>`` (strings of packed records)."""
        return self.queue_prefix + "@revisit:"

    @property
    def revisit_wheel(self) -> str:
        return self.revisit + "wheel"

    @property
    def revisit_meta(self) -> str:
        return self.revisit + "meta"

    @property
    def revisit_templates(self) -> str:
        return self.revisit + "templates"

    @property
    def revisit_superseded(self) -> str:
        """Sorted set: the first 8 bytes of the fingerprints of pages ``scrapy forget`` or
        ``scrapy push --now`` took out of the shard's revisit schedule -> when (Unix ms, Redis
        time): a record scheduled before is dropped when due, and a revisit under way then does
        not schedule the page again."""
        return self.revisit + "superseded"

    @property
    def revisit_moved(self) -> str:
        """Sorted set: the first 8 bytes of the fingerprints of pages moved from the shard's
        revisit schedule lately -> when (Unix ms): a second record of a page due in that window
        is a duplicate (``lua/revisit_due.lua``)."""
        return self.revisit + "moved"

    @property
    def revisit_due(self) -> str:
        """The revisit schedule's former layout, drained as it comes due: sorted set of
        fingerprints -> when due (Unix ms)."""
        return self.revisit + "due"

    @property
    def revisit_requests(self) -> str:
        """The former layout's hash: fingerprint -> ``<host> TAB <score> TAB <payload>``."""
        return self.revisit + "requests"

    def leases(self, node_id: str) -> str:
        return self.lease_prefix + node_id


@dataclass(frozen=True)
class Keys:
    """The concrete key names of one crawl. ``crawl`` is the spider's name, or
    ``<spider>@<CRAWL_ID>`` (:func:`crawl_name`); every template's ``%(spider)s`` and
    ``%(name)s`` expand to it.

    ``shards`` is the crawl's frontier layout, recorded with the crawl (in the dupefilter's
    meta hash) so every worker agrees: 0, the unsharded layout of a single Redis (the names
    below, as scrapy-redis's); n >= 1, n shards, each one hash slot of a Redis Cluster
    (:meth:`shard`), hosts spread over them by :func:`shard_of_host`. Keys that are not per
    host (start URLs, nodes, stats, items, dead letters) keep their names in every layout."""

    spider: str
    crawl: str
    queue: str
    dupefilter: str
    start_urls: str
    items: str
    stats: str
    shards: int = 0

    def with_shards(self, shards: int) -> Keys:
        return replace(self, shards=shards)

    @property
    def tagged(self) -> bool:
        """Whether keys that a script touches together carry hash tags (any sharded layout)."""
        return self.shards > 0

    @functools.cache  # noqa: B019 (Keys is a small frozen value; a crawl has a few of them)
    def shard(self, i: int) -> Shard:
        """The keys of shard ``i`` (0 <= i < max(1, shards)), made once per shard."""
        if not self.shards:
            return Shard(
                0, self.queue, self.dupefilter, f"{self.crawl}:leases:", f"{self.crawl}:politeness:", self.rates
            )
        tag = f"{{{self.crawl}/{i}}}"
        base = f"{self.crawl}:{tag}"
        return Shard(
            i, f"{base}:requests", f"{base}:dupefilter", f"{base}:leases:", f"{base}:politeness:", f"{base}:rates"
        )

    def all_shards(self) -> list[Shard]:
        return [self.shard(i) for i in range(max(1, self.shards))]

    def epoch_keys(self) -> list[str]:
        """The keys that hold the crawl's epoch besides ``epoch`` in :attr:`dupefilter_meta`: each
        shard's :attr:`Shard.epoch` in a sharded crawl (whose shards may live on other Redis
        Cluster masters than the meta), none on a single Redis."""
        return [sh.epoch for sh in self.all_shards()] if self.shards else []

    def shard_of(self, host: str) -> Shard:
        return self.shard(shard_of_host(host, self.shards))

    def start_leases(self, node_id: str) -> str:
        """The raw start URLs a node has taken and not yet acknowledged: a hash, field
        :data:`START_LEASE_PREFIX` + raw payload. Unsharded, the node's lease hash itself;
        sharded, a hash in the slot of the start URLs (:func:`colocated`)."""
        if not self.shards:
            return self.leases(node_id)
        return colocated(self.start_urls, f"leases:{node_id}", True)

    @classmethod
    def for_spider(
        cls, settings: BaseSettings, spider_name: str, spidercls: type | None = None, *, redis_key: str | None = None
    ) -> Keys:
        """The keys of ``spider_name``'s crawl. A scrapy-redis spider's own ``redis_key``
        (``%(name)s`` expanded) names its start URLs, as in scrapy-redis: ``redis_key`` as the
        scheduler read it from the spider instance, else the attribute of ``spidercls`` (what the
        commands have)."""
        crawl = crawl_name(spider_name, settings.get("CRAWL_ID") or "")
        values = {"spider": crawl, "name": crawl}
        start_urls = settings.get("REDIS_START_URLS_KEY") or START_URLS_KEY
        own = redis_key if redis_key is not None else getattr(spidercls, "redis_key", None)
        if isinstance(own, str) and own.strip():
            start_urls = own
        return cls(
            spider=spider_name,
            crawl=crawl,
            queue=(settings.get("SCHEDULER_QUEUE_KEY") or SCHEDULER_QUEUE_KEY) % values,
            dupefilter=(settings.get("SCHEDULER_DUPEFILTER_KEY") or SCHEDULER_DUPEFILTER_KEY) % values,
            start_urls=start_urls % values,
            items=(settings.get("REDIS_ITEMS_KEY") or ITEMS_KEY) % values,
            stats=(settings.get("STATS_KEY") or STATS_KEY) % values,
        )

    @property
    def dupefilter_meta(self) -> str:
        """Who wrote the dupefilter: hash of ``fingerprinter``, ``probe``, ``layout``."""
        return self.dupefilter + ":meta"

    @property
    def bloom(self) -> str:
        """Bloom mode: hash of the filter chain's layout and counts; bits in ``<bloom>:<i>:<segment>``."""
        return self.dupefilter + ":bloom"

    @property
    def bloom_bits_prefix(self) -> str:
        """Prefix of the Bloom filters' bit strings: ``<spider>:dupefilter:bloom:`` + ``<i>:<segment>``
        (filter ``i``, segment of 4 MB)."""
        return self.bloom + ":"

    @property
    def forgotten(self) -> str:
        """Bloom mode: set of hex fingerprints to let through the dupefilter once more."""
        return self.dupefilter + ":forgotten"

    @property
    def forgets(self) -> str:
        """Counter of ``scrapy forget`` calls: a worker that sees it change (at its heartbeat)
        empties its local first look, which may hold the forgotten fingerprints."""
        return self.dupefilter + ":forgets"

    @property
    def queue_prefix(self) -> str:
        """Prefix of the per-host request queues: ``<spider>:requests:`` + host."""
        return self.queue + ":"

    @property
    def slots(self) -> str:
        return self.queue

    @property
    def failed(self) -> str:
        """Dead letters: requests that failed for good (JSON: request, reason, status, attempts)."""
        return self.queue + ":failed"

    @property
    def start_urls_invalid(self) -> str:
        """Dead letters: start-URL payloads that were refused (JSON: payload, reason, detail)."""
        return self.start_urls + ":invalid"

    @property
    def items_invalid(self) -> str:
        """Dead letters: items refused by validation (JSON: item, field, reason)."""
        return self.items + ":invalid"

    @property
    def items_pending(self) -> str:
        """Items that could not be written to MySQL yet, replayed when it is back."""
        return self.items + ":pending"

    @property
    def items_replaying_prefix(self) -> str:
        """Prefix of the lists of pending items being replayed: ``<spider>:items:pending:`` + node."""
        return self.items_pending + ":"

    def items_replaying(self, node_id: str) -> str:
        """Pending items a node is writing now; returned to the pending list if the node dies
        (in the pending list's hash slot when the crawl is sharded)."""
        return colocated(self.items_pending, node_id, self.tagged)

    @property
    def item_cache_prefix(self) -> str:
        """Write-through cache of the latest version of each item (unsharded): prefix + sha1(unique key)."""
        return self.items + ":cache:"

    def item_cache_shard(self, digest: str) -> int:
        """The shard of the cache entry whose key ends in ``digest`` (hex): its first 8 digits
        modulo the shard count (0 unsharded)."""
        return int(digest[:8], 16) % self.shards if self.shards > 1 else 0

    def item_cache(self, digest: str) -> str:
        """The cache key of an item whose unique key hashes to ``digest`` (hex SHA-1):
        ``<spider>:items:cache:<digest>``, or, sharded, ``<spider>:{<spider>/<i>}:items:cache:<digest>``
        (a batch of cache writes is one script call per shard)."""
        if not self.shards:
            return self.item_cache_prefix + digest
        return f"{self.crawl}:{{{self.crawl}/{self.item_cache_shard(digest)}}}:items:cache:{digest}"

    def item_cache_bucket(self, n: int) -> str:
        """Bucket ``n`` of the lean item cache (``REDIS_CACHE_ITEMS`` off): a hash of many items'
        markers, ``<spider>:items:cache:@<n>``, sharded ``<spider>:{<spider>/<i>}:items:cache:@<n>``
        (``i`` = ``n`` modulo the shard count)."""
        if not self.shards:
            return f"{self.item_cache_prefix}@{n}"
        return f"{self.crawl}:{{{self.crawl}/{n % self.shards if self.shards > 1 else 0}}}:items:cache:@{n}"

    @property
    def item_cache_match(self) -> str:
        """A ``SCAN MATCH`` pattern of every cache key of the crawl."""
        if not self.shards:
            return self.item_cache_prefix + "*"
        return f"{self.crawl}:{{{self.crawl}/*}}:items:cache:*"

    @property
    def scrapy_redis_queue(self) -> str:
        """A scrapy-redis queue being adopted (:mod:`scrapy_frontier.adopt`), renamed from
        ``<spider>:requests``: ``<spider>:scrapy-redis:requests``."""
        return f"{self.crawl}:scrapy-redis:requests"

    @property
    def scrapy_redis_lock(self) -> str:
        """The adoption lock: the id of the node moving the scrapy-redis queue, with a TTL."""
        return f"{self.crawl}:scrapy-redis:adopting"

    @property
    def scrapy_redis_invalid(self) -> str:
        """Dead letters: adopted scrapy-redis requests that could not be read (JSON: reason,
        detail, ``payload_base64``, the bytes as scrapy-redis stored them)."""
        return f"{self.crawl}:scrapy-redis:invalid"

    @property
    def nodes(self) -> str:
        """Node registry: sorted set of node ids, score = last heartbeat (Unix ms)."""
        return f"{self.crawl}:nodes"

    @property
    def node_info_prefix(self) -> str:
        """Prefix of the nodes' info hashes: ``<spider>:nodes:`` + node (facts about the node,
        with a TTL: ``host``, ``pid``, ``started`` (Unix s), ``pages``, ``items``, ``leases``,
        ``beat`` (Unix ms), ``metrics`` (address of its metrics server))."""
        return self.nodes + ":"

    @property
    def lease_prefix(self) -> str:
        """In-flight requests of a node: hash ``<spider>:leases:<node>`` of
        ``<lease id>\\t<score>\\t<host>`` -> the payload as its queue stored it (frontier.Lease);
        a raw start URL is the field
        :data:`START_LEASE_PREFIX` + payload, value a tab."""
        return f"{self.crawl}:leases:"

    @property
    def politeness_prefix(self) -> str:
        """Per-host politeness state, shared by every worker (the rate rule that reads it:
        ``scrapy_frontier/lua/lib/politeness_policy.lua``). What changes with each send or
        response is kept in one hash per shard for all its hosts, so that a lease or push call
        reads and writes it for a whole batch of hosts in one command:

        - ``<prefix>@next`` (:attr:`Shard.next_send`), host -> Unix ms: when the host may next
          send, past every send booked: the lease script books the sends of the requests it
          leases (one every ``1 / rate`` seconds from now) and moves it past the last;
          :meth:`Politeness.reserve <scrapy_frontier.politeness.Politeness.reserve>` books one
          more send for a request whose booking did not hold (it could not leave on time, or the
          host was slowed down since).
        - ``<prefix>@at_delay`` (:attr:`Shard.at_delay`), host -> µs: the host's
          AutoThrottle delay for the whole crawl
          (:class:`~scrapy_frontier.politeness.SharedAutoThrottle`); ``1 / at_delay`` caps the rate.
        - ``<prefix>@latency`` (:attr:`Shard.latency`), host -> µs: the download latency of the
          host's last response a worker reported (``-1 - latency`` for a response that is not a 200).

        The rest is a hash of the host's own, ``<spider>:politeness:<host>``, which exists only
        for a host in :attr:`limited`:

        - ``pause_until`` (Unix ms): from a ``Retry-After``, or until the host's robots.txt, which
          could not be fetched, is tried again; nothing is leased or sent before.
        - ``factor`` (0-1, absent = 1): slow-down factor the rate is multiplied by; a 429 or 503
          halves it (down to ``POLITENESS_MIN_FACTOR``), each later success adds
          ``POLITENESS_RECOVERY_STEP``.
        - ``base_rate`` (requests/second): the rate (``POLITENESS_BASE_RATE``) a host with no
          rate of its own got when it was first slowed down, kept while ``factor`` < 1.
        - ``robots_delay`` (seconds): the host's robots.txt Crawl-delay; ``1 / robots_delay`` caps
          the rate.

        The requests of a host in flight are counted in the shard's :attr:`Shard.inflight` hash."""
        return f"{self.crawl}:politeness:"

    @property
    def limited(self) -> str:
        """Set of hosts whose every request needs a send-time check even without
        ``DOMAIN_RATE_LIMIT``: slowed down or paused after a 429/503, or with a robots.txt
        Crawl-delay (``@`` keeps it apart from host names)."""
        return f"{self.crawl}:politeness:@limited"

    @property
    def cookies(self) -> str:
        """The crawl's shared cookie jar (``COOKIES_SHARED``): a hash, one field per cookie (JSON
        ``[jar, domain, path, name]``, ``jar`` the request's ``cookiejar`` meta key) -> the cookie
        (JSON, :mod:`scrapy_frontier.downloadermiddlewares.cookies`). Cleared with the crawl."""
        return f"{self.crawl}:cookies"

    @property
    def cookie_events(self) -> str:
        """Pub/sub channel: the cookies a worker set or deleted, for the other workers' jars."""
        return f"{self.crawl}:cookies:@events"

    @property
    def politeness_events(self) -> str:
        """Pub/sub channel: a host name is published when it joins ``limited``, so every worker
        checks its next sends at once."""
        return f"{self.crawl}:politeness:@events"

    def robots(self, netloc: str) -> str:
        """The cached robots.txt of a host: hash of ``status`` and ``body``, with a TTL; while it
        cannot be fetched also ``since``, ``tries``, ``retry_at`` and ``given_up``
        (:class:`~scrapy_frontier.downloadermiddlewares.robotstxt.RetrySchedule`)."""
        return f"{self.crawl}:robots:{netloc}"

    @property
    def rates(self) -> str:
        """Live per-host rate overrides (requests/second), ``HSET <spider>:rates <host> <rate>``."""
        return f"{self.crawl}:rates"

    def node_info(self, node_id: str) -> str:
        return self.node_info_prefix + node_id

    def leases(self, node_id: str) -> str:
        return self.lease_prefix + node_id


_registered: weakref.WeakKeyDictionary[Any, Keys] = weakref.WeakKeyDictionary()


def register(crawler: Any, keys: Keys) -> None:
    """Make ``keys`` (with the crawl's recorded shard count) the keys every component of
    ``crawler`` uses (the scheduler calls this once it has joined the crawl)."""
    _registered[crawler] = keys


def keys_of(crawler: Any) -> Keys:
    """The keys of ``crawler``'s crawl: those the scheduler registered, else read from the
    settings (unsharded)."""
    keys = _registered.get(crawler)
    if keys is None:
        spider = crawler.spider
        keys = Keys.for_spider(crawler.settings, spider.name, type(spider))
    return keys
