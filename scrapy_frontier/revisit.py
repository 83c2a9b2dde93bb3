"""Revisits: a crawl that keeps its pages fresh (``REVISIT_INTERVAL`` > 0, distributed mode).

Every page a spider callback handled with a ``200`` is scheduled again, due after its revisit
interval; the schedule lives in the frontier (each shard's packed records in buckets by due
time, ``lua/lib/revisit_wheel.lua``, :meth:`~scrapy_frontier.frontier.Frontier.schedule`), and a
due page enters its host's queue (:meth:`~scrapy_frontier.frontier.Frontier.queue_due`), to be
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
last ``ETag`` and ``If-Modified-Since`` with the last ``Last-Modified``, put in by the scheduler
when it takes the revisit from the frontier (:func:`add_validators`). A ``304 Not Modified``
counts as unchanged: the callback is not called (Scrapy's ``HttpErrorMiddleware`` would filter
it; the revisit middleware takes it first, so that no line is logged for it), nothing is
stored, no link is extracted again, and the page is scheduled again. Any other answer (``404``,
``410``, a ``5xx`` once retries are spent, a download error) takes the page out of the
schedule: a failed request goes to the dead letters as in any crawl.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import time
import zlib
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.exceptions import NotConfigured
from scrapy.http import Request
from scrapy.spidermiddlewares.httperror import HttpError

from scrapy_frontier.config import fail_at_open, read_setting
from scrapy_frontier.payload import compact_payload, expand_payload
from scrapy_frontier.scripts import source

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Request meta key: the page's revisit state (:func:`read_state`'s form), kept in the frontier with it.
REVISIT_META = "revisit"
#: Request meta key the middleware sets and the scheduler takes out: (seconds until the request
#: is due, when the revisit just fetched was scheduled: Unix ms, 0 after a first fetch); the
#: request goes to the revisit schedule, not to its host's queue.
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
        if not error and self.interval and read_setting(crawler, "DUPEFILTER_RECRAWL_AGE"):
            error = (
                "Settings REVISIT_INTERVAL and DUPEFILTER_RECRAWL_AGE cannot be used together: revisits fetch "
                "every stored page again on its own schedule, and a page found again after the recrawl age "
                "would be scheduled twice"
            )
        if error:
            fail_at_open(crawler, "%s", error)
            raise NotConfigured
        if not self.interval:
            raise NotConfigured  # a one-shot crawl
        self.stats = crawler.stats
        # headers Scrapy's middlewares set afresh at each download (docs/revisits.md)
        self.dropped_headers: tuple[bytes, ...] = (*_CONDITIONAL, b"Referer")
        if crawler.settings.getbool("COOKIES_ENABLED"):
            self.dropped_headers += (b"Cookie",)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RevisitMiddleware:
        return cls(crawler)

    # ``spider``: Scrapy 2.11 to 2.13 pass it; optional, so later ones do not
    def process_spider_output(self, response: Response, result: Iterable[Any], spider: Any = None) -> Iterator[Any]:
        out = list(result)
        yield from self._revisited(response, out)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        out = [x async for x in result]
        for x in self._revisited(response, out):
            yield x

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Any = None
    ) -> list[Any] | None:
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
        state = read_state(request.meta.get(REVISIT_META))
        now = int(time.time())
        interval = float(state.get("interval") or self.interval)
        if response.status == 304 and state:
            self.stats.inc_value("revisit/not_modified")
            self.stats.inc_value("revisit/unchanged")
            state["interval"] = next_interval(interval, False, self.low, self.high)
            state["etag"] = _etag(response) or state.get("etag")
            yield from out
            yield self._next(request, state)
            return
        if response.status != 200:
            if state:  # a revisit: the page leaves the schedule
                self.stats.inc_value(f"revisit/dropped/{response.status}")
            yield from out
            return
        items = [x for x in out if not isinstance(x, Request)]
        digest = signature(response, items)[:16]
        if not state:
            state = {"interval": interval, "first_seen": now, "changed_at": None, "changes": 0}
        else:
            state["first_seen"] = state.get("first_seen") or now
            changed = digest != state.get("hash")
            self.stats.inc_value("revisit/changed" if changed else "revisit/unchanged")
            if changed:
                state["changed_at"] = now
                state["changes"] = int(state.get("changes") or 0) + 1
            state["interval"] = next_interval(interval, changed, self.low, self.high)
        state["hash"] = digest
        state["etag"] = _etag(response)
        state["last_modified"] = _http_date(response.headers.get(b"Last-Modified"))
        for item in items:
            adapter = ItemAdapter(item)
            for field, value in (
                ("first_seen", _iso(state["first_seen"])),
                ("changed_at", _iso(state["changed_at"])),
                ("changes", state["changes"]),
            ):
                if field in adapter.field_names():
                    adapter[field] = value
        yield from out
        yield self._next(request, state)

    def _next(self, request: Request, state: dict[str, Any]) -> Request:
        """The revisit of ``request``'s page: its first URL (before redirects), due in
        ``state["interval"]`` seconds; its conditional headers are put in when it is taken from
        the frontier (:func:`add_validators`). Without the ``Referer`` of its first fetch (its
        parent page's), nor its ``Cookie`` when Scrapy's cookie middleware sets it again: a value
        of its own per page would make its template its own (docs/revisits.md)."""
        meta = {k: v for k, v in request.meta.items() if k not in _TRANSIENT and not k.startswith("_")}
        since = int(state.pop("scheduled", 0) or 0) if REVISIT_META in request.meta else 0
        meta[REVISIT_IN_META] = (state["interval"], since)
        meta[REVISIT_META] = state
        headers = request.headers.copy()
        for name in self.dropped_headers:
            headers.pop(name, None)
        self.stats.inc_value("revisit/scheduled")
        url = (request.meta.get("redirect_urls") or [request.url])[0]
        return request.replace(url=url, headers=headers, meta=meta, dont_filter=True)


#: The request headers of a conditional GET (RFC 9110 sections 13.1.2 and 13.1.3).
_CONDITIONAL = (b"If-None-Match", b"If-Modified-Since")


def add_validators(request: Request) -> bool:
    """Make a revisit taken from the frontier a conditional GET (RFC 9110 section 13.1): its
    state's ETag as ``If-None-Match``, its Last-Modified as ``If-Modified-Since``. Returns
    whether it carries one."""
    state = read_state(request.meta.get(REVISIT_META))
    etag, modified = state.get("etag"), state.get("last_modified")
    if etag:
        request.headers[b"If-None-Match"] = etag
    if modified:
        request.headers[b"If-Modified-Since"] = formatdate(modified, usegmt=True)
    return bool(etag or modified)


def read_state(state: Any) -> dict[str, Any]:
    """A revisit state as the schedule gives it back (times in Unix seconds, the first 16 hex
    digits of the content hash), its values checked: one that does not fit (a state in a start
    URL's meta, say) is left out, as if that fetch had not recorded it; a state written before
    the packed schedule (ISO times, a whole hash, an HTTP-date) is read into that form."""
    if not isinstance(state, dict):
        return {}
    out: dict[str, Any] = {}
    interval = state.get("interval")
    if isinstance(interval, (int, float)) and 0 < interval < float("inf"):
        out["interval"] = float(interval)
    for key in ("first_seen", "changed_at"):
        value = state.get(key)
        if isinstance(value, str):
            try:
                value = int(datetime.fromisoformat(value).timestamp())
            except ValueError:
                value = None
        out[key] = value if isinstance(value, int) and 0 < value < 2**32 else None
    changes = state.get("changes")
    out["changes"] = min(changes, 2**32 - 1) if isinstance(changes, int) and changes > 0 else 0
    modified = state.get("last_modified")
    if isinstance(modified, str):
        modified = _http_date(modified.encode("latin-1", "replace"))
    out["last_modified"] = modified if isinstance(modified, int) and 0 < modified < 2**32 else None
    etag = state.get("etag")
    out["etag"] = etag if isinstance(etag, str) and _keepable_etag(etag.encode("utf-8")) else None
    digest = state.get("hash")
    if isinstance(digest, str) and len(digest) >= 16 and all(c in "0123456789abcdef" for c in digest[:16]):
        out["hash"] = digest[:16]
    scheduled = state.get("scheduled")
    if isinstance(scheduled, int) and scheduled > 0:
        out["scheduled"] = scheduled
    return out


#: The revisit state's stand-in in a revisit's template (``lua/lib/revisit_wheel.lua``).
STATE_MARK = "\x00revisit-state\x00"
#: :data:`STATE_MARK` as the request's JSON writes it.
_STATE_JSON = json.dumps(STATE_MARK, ensure_ascii=False)
#: The start of a request's JSON (:func:`~scrapy_frontier.serialize.request_to_json` writes the URL first).
_URL_OPEN = '{"url":"'
_JSON = json.JSONDecoder()


def schedule_args(
    payload: str, host: str, score: str, fingerprint: str, seconds: float, since: int, state: dict[str, Any]
) -> list[Any]:
    """The 13 values ``lua/revisit_schedule.lua`` takes for one page, in the record's order
    (``lua/lib/revisit_wheel.lua``). ``payload``: the JSON of the page's revisit request with
    :data:`STATE_MARK` as its revisit state; ``host`` its queue's host, ``score`` its priority as
    the queue holds it (-priority, text), ``fingerprint`` hex, ``seconds`` until it is due,
    ``since`` when the revisit that scheduled it was scheduled (Unix ms; 0: a first fetch),
    ``state`` its revisit state (:func:`read_state`'s form). The template is the payload's queued
    form less its URL's path and the state: pages of a host and request shape share one. Raises
    ``ValueError`` for a payload that does not hold the mark."""
    end = _JSON.raw_decode(payload, len(_URL_OPEN) - 1)[1] if payload.startswith(_URL_OPEN) else 0
    if not end:
        raise ValueError("a revisit's JSON starts with its URL")
    compact = compact_payload(payload, host)
    url_end = end - 1 - (len(payload) - len(compact))  # the URL's closing quote in the compact form
    if compact.startswith("{"):  # a host the queue does not take out (capitals, IPv6): in the template
        head, tail = compact[:url_end], ""
    else:
        head = "h" if compact.startswith("h") else ""
        tail = compact[len(head) : url_end]
    middle, after = compact[url_end:].split(_STATE_JSON, 1)
    template = "\0".join((host, score, head, middle, after))
    return [
        fp_key(fingerprint),
        max(0, round(seconds * 1000)),
        template,
        zlib.crc32(template.encode()),
        repr(float(state["interval"])),
        int(state.get("first_seen") or 0),
        int(state.get("changed_at") or 0),
        min(int(state.get("changes") or 0), 2**32 - 1),
        bytes.fromhex((state.get("hash") or "").ljust(16, "0")[:16]),
        int(state.get("last_modified") or 0),
        state.get("etag") or "",
        tail,
        since,
    ]


def supersede(client: Any, keys: Any, fingerprints: dict[int, list[str]]) -> int:
    """Take pages out of the revisit schedule (``scrapy forget``, ``scrapy push --now``): their
    records scheduled before now (Redis time) are dropped when due, and a revisit of one of them
    queued or in flight does not schedule it again; a first fetch of it does
    (``lua/revisit_supersede.lua``). ``fingerprints`` (hex) by frontier shard index; ``client`` a
    synchronous redis client. Returns how many were marked, scheduled or not: the schedule has
    no index by page."""
    script = client.register_script(source("revisit_supersede"))
    return sum(
        int(script(keys=[keys.shard(index).revisit_superseded], args=[fp_key(fp) for fp in fps]))
        for index, fps in fingerprints.items()
        if fps
    )


def fp_key(fingerprint: str) -> bytes:
    """A fingerprint (hex) as the revisit schedule names it: its first 8 bytes. A scheduled page
    is taken for a superseded one that shares them with a chance of 1 in 2^64 per superseded
    page."""
    return bytes.fromhex(fingerprint[:16])


#: A record's fixed part (``lua/lib/revisit_wheel.lua``'s WHEEL_RECORD up to the ETag's length).
_RECORD = struct.Struct("<8sIfIII8sIB")


def read_schedule(client: Any, keys: Any) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Every page in the revisit schedule, shard by shard, as ``lua/revisit_due.lua`` will move
    them (for tests and inspection; it reads the whole schedule): ``(url, bucket's end in Unix
    ms, record fields)``. ``client``: a synchronous redis client."""
    for sh in keys.all_shards():
        superseded = dict(client.zrange(sh.revisit_superseded, 0, -1, withscores=True))
        templates = {int(k): v.decode().split("\0") for k, v in client.hgetall(sh.revisit_templates).items()}
        for part, ends in client.zrange(sh.revisit_wheel, 0, -1, withscores=True):
            data = client.get(sh.revisit + "b:" + part.decode()) or b""
            pos = 0
            while pos < len(data):
                fields = _RECORD.unpack_from(data, pos)
                pos += _RECORD.size
                etag = data[pos : pos + fields[-1]].decode()
                pos += fields[-1]
                (size,) = struct.unpack_from("<H", data, pos)
                tail = data[pos + 2 : pos + 2 + size].decode()
                pos += 2 + size
                host, _, head, _, _ = templates[fields[1]]
                url = json.loads(expand_payload((head + tail + '"}').encode(), host.encode()))["url"]
                names = ("fingerprint", "template", "interval", "first_seen", "changed_at", "changes", "hash")
                record = dict(zip(names, fields))
                record.update(last_modified=fields[7], etag=etag)
                if ends - int(record["interval"] * 1000) >= superseded.get(record["fingerprint"], 0):
                    yield url, int(ends), record


def _etag(response: Response) -> str | None:
    """The response's ETag when the schedule can keep it: printable ASCII (RFC 9110 section
    8.8.3's ``etagc`` less obs-text), at most 255 characters; else ``None`` (Last-Modified alone
    then makes the revisit conditional)."""
    value = response.headers.get(b"ETag")
    return value.decode("ascii") if value and _keepable_etag(value) else None


def _keepable_etag(value: bytes) -> bool:
    return 0 < len(value) <= 255 and all(0x21 <= b <= 0x7E for b in value)


def _http_date(value: bytes | None) -> int | None:
    """An HTTP-date (RFC 9110 section 5.6.7) in Unix seconds, ``None`` when absent, unreadable
    or more than a minute ahead of this worker's clock (RFC 9110 section 8.8.2.1: an origin's
    Last-Modified is never in the future; such a date would make every revisit a 304)."""
    if not value:
        return None
    try:
        seconds = int(parsedate_to_datetime(value.decode("latin-1")).timestamp())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return seconds if 0 < seconds <= time.time() + 60 else None


def _iso(seconds: int | None) -> str | None:
    """Unix seconds as an ISO 8601 time (UTC), ``None`` as it is."""
    return datetime.fromtimestamp(seconds, UTC).isoformat() if seconds else None
