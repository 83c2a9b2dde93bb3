"""Revisits: a crawl that keeps its pages fresh (``REVISIT_INTERVAL`` > 0, distributed mode).

Every page a spider callback handled with a ``200`` is scheduled again, due after its revisit
interval; the schedule lives in the frontier (each shard's ``<queue>:@revisit:due`` and
``<queue>:@revisit:requests``, :meth:`~scrapy_frontier.frontier.Frontier.schedule`), and a due
page enters its host's queue (:meth:`~scrapy_frontier.frontier.Frontier.queue_due`), to be
leased, paced and acknowledged as any request. The scheduling rides in the flush that
acknowledges the page's lease, before the acknowledgement: a worker that dies before it leaves
the lease to be reclaimed, and the page is fetched and scheduled again.

The interval adapts as Nutch's ``AdaptiveFetchSchedule`` does: it shrinks by
:data:`SHRINK` (x 0.8) when the page changed since the last fetch and grows by :data:`GROW`
(x 1.4) when it did not, within ``REVISIT_MIN_INTERVAL`` and ``REVISIT_MAX_INTERVAL``.

"Changed" is decided on the page's main content, not its bytes: the ``content_hash`` of the
items the callback yielded (the ``site`` spider's :class:`~crawler.items.Page` hashes its title
and main text, so adverts, timestamps and "latest news" boxes do not count). A response without
items is compared by the hash of its body.

A revisit is a conditional GET (RFC 9110 section 13.1): it carries ``If-None-Match`` with the
last ``ETag`` and ``If-Modified-Since`` with the last ``Last-Modified``. A ``304 Not Modified``
counts as unchanged: the callback is not called (Scrapy's ``HttpErrorMiddleware`` would filter
it; the revisit middleware takes it first, so that no line is logged for it), nothing is
stored, no link is extracted again, and the page is scheduled again. Any other answer (``404``,
``410``, a ``5xx`` once retries are spent, a download error) takes the page out of the
schedule: a failed request goes to the dead letters as in any crawl.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.exceptions import NotConfigured
from scrapy.http import Request
from scrapy.spidermiddlewares.httperror import HttpError

from scrapy_frontier.config import fail_at_open, read_setting

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Request meta key: the page's revisit state (:func:`new_state`), kept in the frontier with it.
REVISIT_META = "revisit"
#: Request meta key the middleware sets and the scheduler takes out: (seconds until the request
#: is due, whether the page was scheduled before this fetch); the request goes to the revisit
#: schedule, not to its host's queue.
REVISIT_IN_META = "_revisit_in"
#: The interval's factor after a change (Nutch's ``db.fetch.schedule.adaptive.dec_rate`` 0.2).
SHRINK = 0.8
#: The interval's factor after a fetch that found no change (Nutch's ``inc_rate`` 0.4).
GROW = 1.4

#: Meta keys of one fetch that a revisit does not carry over.
_TRANSIENT = {
    "redirect_urls",
    "redirect_times",
    "redirect_ttl",
    "redirect_reasons",
    "retry_times",
    "retry_not_before",
    "dont_filter_by_retry",
    "download_latency",
    "download_slot",
    "is_start_request",
}


def check_intervals(interval: float, low: float, high: float) -> str | None:
    """The one-line error for ``REVISIT_INTERVAL``, ``REVISIT_MIN_INTERVAL`` and
    ``REVISIT_MAX_INTERVAL`` (seconds) that do not fit together, else ``None``."""
    if low > high:
        return f"Setting REVISIT_MIN_INTERVAL={low:g} is above REVISIT_MAX_INTERVAL={high:g}"
    if interval and not low <= interval <= high:
        return (
            f"Setting REVISIT_INTERVAL={interval:g} is out of range: it must be 0 (no revisits) or between "
            f"REVISIT_MIN_INTERVAL={low:g} and REVISIT_MAX_INTERVAL={high:g} seconds"
        )
    return None


def next_interval(interval: float, changed: bool, low: float, high: float) -> float:
    """The interval (seconds) after a fetch: ``interval`` x :data:`SHRINK` when the page
    ``changed``, x :data:`GROW` when not, within ``[low, high]``."""
    return min(high, max(low, interval * (SHRINK if changed else GROW)))


def signature(response: Response, items: Iterable[Any]) -> str:
    """What decides "changed": the ``content_hash`` of each item (in order), else the SHA-256 of
    the body, hashed together (SHA-256, hex)."""
    hashes = []
    for item in items:
        adapter = ItemAdapter(item)
        value = adapter.get("content_hash") if "content_hash" in adapter.field_names() else None
        if value:
            hashes.append(str(value))
    if not hashes:
        hashes.append(hashlib.sha256(response.body).hexdigest())
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class RevisitMiddleware:
    """Spider middleware (order 60: just outside Scrapy's ``HttpErrorMiddleware``, 50, so that
    it sees the ``HttpError`` of a ``304`` first, and takes it without the line that middleware
    logs for every response it ignores). For each response of a page request, passes the
    callback's output on, then schedules the page's revisit (a request with
    :data:`REVISIT_IN_META`, which the scheduler puts in the revisit schedule).

    Items with the fields ``first_seen``, ``changed_at`` and ``changes`` get them filled in:
    when the page was first fetched, when its main content last changed, how many times it
    changed (the stored row is updated in place, keyed on its unique key).

    Stats: ``revisit/scheduled``, ``revisit/changed``, ``revisit/unchanged``,
    ``revisit/not_modified`` (304), ``revisit/conditional`` (revisits sent with a validator),
    ``revisit/dropped/<status>`` (pages that left the schedule)."""

    def __init__(self, crawler: Crawler) -> None:
        self.interval = read_setting(crawler, "REVISIT_INTERVAL")
        if not crawler.settings.get("REDIS_URL"):
            if self.interval:
                fail_at_open(
                    crawler, "Setting REVISIT_INTERVAL needs distributed mode (REDIS_URL): the schedule is in Redis"
                )
            raise NotConfigured  # embedded mode: one process, a crawl that ends
        self.low = read_setting(crawler, "REVISIT_MIN_INTERVAL")
        self.high = read_setting(crawler, "REVISIT_MAX_INTERVAL")
        error = check_intervals(self.interval, self.low, self.high)
        if error:
            fail_at_open(crawler, "%s", error)
            raise NotConfigured
        if not self.interval:
            raise NotConfigured  # a one-shot crawl
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RevisitMiddleware:
        return cls(crawler)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        out = list(result)
        yield from self._revisited(response, out)

    async def process_spider_output_async(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        out = [x async for x in result]
        for x in self._revisited(response, out):
            yield x

    def process_spider_exception(self, response: Response, exception: Exception) -> list[Any] | None:
        """A revisit answered ``304`` (Scrapy's ``HttpError``): its next revisit, and nothing
        else. Another status of a revisit (a ``404``, a ``410``) is counted as leaving the
        schedule, and left to ``HttpErrorMiddleware``."""
        request = response.request
        if not isinstance(exception, HttpError) or request is None or not request.meta.get(REVISIT_META):
            return None
        out = list(self._revisited(response, []))
        return out if response.status == 304 else None

    def _revisited(self, response: Response, out: list[Any]) -> Iterator[Any]:
        """``out`` with the page's items completed and its revisit after them (none for a response
        that is not a 200 or a 304, which takes the page out of the schedule)."""
        request = response.request
        if request is None:
            yield from out
            return
        state = dict(request.meta.get(REVISIT_META) or {})
        now = _now()
        interval = float(state.get("interval") or self.interval)
        if response.status == 304 and state:
            self.stats.inc_value("revisit/not_modified")
            self.stats.inc_value("revisit/unchanged")
            state["interval"] = next_interval(interval, False, self.low, self.high)
            etag = response.headers.get(b"ETag")
            if etag:
                state["etag"] = etag.decode("latin-1")
            yield from out
            yield self._next(request, state)
            return
        if response.status != 200:
            if state:  # a revisit: the page leaves the schedule
                self.stats.inc_value(f"revisit/dropped/{response.status}")
            yield from out
            return
        items = [x for x in out if not isinstance(x, Request)]
        digest = signature(response, items)
        if not state:
            state = {"interval": interval, "first_seen": now, "changed_at": None, "changes": 0}
        else:
            changed = digest != state.get("hash")
            self.stats.inc_value("revisit/changed" if changed else "revisit/unchanged")
            if changed:
                state["changed_at"] = now
                state["changes"] = int(state.get("changes") or 0) + 1
            state["interval"] = next_interval(interval, changed, self.low, self.high)
        state["hash"] = digest
        state["etag"] = _header(response, b"ETag")
        state["last_modified"] = _header(response, b"Last-Modified")
        for item in items:
            adapter = ItemAdapter(item)
            for field, value in (
                ("first_seen", state["first_seen"]),
                ("changed_at", state["changed_at"]),
                ("changes", state["changes"]),
            ):
                if field in adapter.field_names():
                    adapter[field] = value
        yield from out
        yield self._next(request, state)

    def _next(self, request: Request, state: dict[str, Any]) -> Request:
        """The revisit of ``request``'s page: its first URL (before redirects), the validators of
        ``state`` as conditional headers, due in ``state["interval"]`` seconds."""
        meta = {k: v for k, v in request.meta.items() if k not in _TRANSIENT and not k.startswith("_")}
        meta[REVISIT_IN_META] = (state["interval"], REVISIT_META in request.meta)
        meta[REVISIT_META] = state
        headers = request.headers.copy()
        for name in (b"If-None-Match", b"If-Modified-Since"):
            headers.pop(name, None)
        if state.get("etag"):
            headers[b"If-None-Match"] = state["etag"]
        if state.get("last_modified"):
            headers[b"If-Modified-Since"] = state["last_modified"]
        if state.get("etag") or state.get("last_modified"):
            self.stats.inc_value("revisit/conditional")
        self.stats.inc_value("revisit/scheduled")
        url = (request.meta.get("redirect_urls") or [request.url])[0]
        return request.replace(url=url, headers=headers, meta=meta, dont_filter=True)


#: Seconds a page ``scrapy forget`` took out of the schedule stays marked so: a revisit of it
#: queued or in flight then does not schedule it again.
FORGOTTEN_FOR = 86400


def unschedule(client: Any, keys: Any, fingerprints: dict[int, list[str]]) -> int:
    """Take pages out of the revisit schedule (``scrapy forget``), and mark them so for
    :data:`FORGOTTEN_FOR` seconds (a revisit of one already queued or in flight leaves it out):
    ``fingerprints`` (hex) by frontier shard index; ``client`` a synchronous redis client.
    Returns how many were in the schedule."""
    taken = 0
    for index, fps in fingerprints.items():
        if fps:
            sh = keys.shard(index)
            with client.pipeline(transaction=True) as pipe:
                pipe.zrem(sh.revisit_due, *fps)
                pipe.hdel(sh.revisit_requests, *fps)
                pipe.sadd(sh.revisit_forgotten, *fps)
                pipe.expire(sh.revisit_forgotten, FORGOTTEN_FOR)
                taken += int(pipe.execute()[0])
    return taken


def make_due(client: Any, keys: Any, fingerprints: dict[int, list[str]]) -> set[str]:
    """Make scheduled pages due now (``scrapy push --now``), their revisit state kept:
    ``fingerprints`` (hex) by frontier shard index; ``client`` a synchronous redis client.
    Returns the fingerprints that were scheduled."""
    due: set[str] = set()
    for index, fps in fingerprints.items():
        if fps:
            sh = keys.shard(index)
            with client.pipeline(transaction=False) as pipe:
                for fp in fps:
                    pipe.zadd(sh.revisit_due, {fp: 0}, xx=True, ch=True)
                due |= {fp for fp, changed in zip(fps, pipe.execute()) if changed}
    return due


def _header(response: Response, name: bytes) -> str | None:
    value = response.headers.get(name)
    return value.decode("latin-1") if value else None
