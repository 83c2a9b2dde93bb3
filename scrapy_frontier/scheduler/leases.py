"""This worker's leases: the requests it took from the frontier and has not finished yet.

A lease ends in one of three ways, each recorded here and sent to Redis by the scheduler's next
flush (acknowledgements go with the pushes of the requests the response produced, never before):

- Scrapy is done with the response (:meth:`LeaseBook.scraped`): acknowledged;
- the request failed for good (retries exhausted, a download error, an error in the callback):
  acknowledged and kept as a dead letter in ``<spider>:requests:failed``;
- a downloader middleware replaced the request (a retry or a redirect, :meth:`LeaseBook.replaced`):
  the parent's response never reaches the scraper, so its lease ends when the child is queued,
  or, when the child never reaches the scheduler (Scrapy's offsite filter drops a redirect to
  another host before it) or is not a retry or a redirect, once the engine has handed it on
  (:meth:`LeaseBook.handed_on`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from twisted.python.failure import Failure

from scrapy_frontier.scrapy_compat import DOWNLOAD_CANCELLED

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.statscollectors import StatsCollector

    from scrapy_frontier.frontier import Lease
    from scrapy_frontier.keys import Keys

logger = logging.getLogger(__name__)

#: Request meta key: the field of the lease a request was taken under (frontier.Lease).
LEASE_META = "_frontier_lease"
#: Request meta key: set by the retry middleware or a callback error, the request failed for good.
FAILED_META = "_frontier_failed"
#: Request meta key (kept in the frontier): ``dont_filter`` was set by a retry, not by the spider.
RETRY_DONT_FILTER_META = "dont_filter_by_retry"


@dataclass
class _Lease:
    request: Request
    payload: bytes
    retry_times: int
    redirect_times: int


def failure_record(reason: str, exception: BaseException | Failure) -> dict[str, str]:
    """The ``FAILED_META`` value for a request that failed for good: ``reason`` (a stat word) and
    the exception as ``Type: message`` (at most 500 characters)."""
    if isinstance(exception, Failure):
        text = f"{exception.type.__name__}: {exception.getErrorMessage()}"
    else:
        text = f"{type(exception).__name__}: {exception}"
    return {"reason": reason, "exception": text[:500]}


class LeaseBook:
    """The leases of one worker, and what to send to Redis about them at the next flush:
    :attr:`to_ack` (lease fields) and :attr:`to_fail` (dead-letter records, JSON text)."""

    def __init__(self, keys: Keys, node_id: str, stats: StatsCollector, maxsize: int = 0) -> None:
        self.keys = keys
        self.node_id = node_id
        self.stats = stats
        #: DOWNLOAD_MAXSIZE (bytes), named in the dead letter of a download it cancelled
        self.maxsize = maxsize
        self._leases: dict[bytes, _Lease] = {}
        self.to_ack: list[bytes] = []
        self.to_fail: list[str] = []
        #: The last request offered to the scheduler (:meth:`replaced` sees every one).
        self._offered: Request | None = None
        self._log_drops = True
        #: The kinds of IgnoreRequest already logged at INFO (:meth:`_ignored`).
        self._drop_reasons: set[str] = set()

    def __len__(self) -> int:
        return len(self._leases)

    def fields(self) -> set[bytes]:
        """The lease fields this worker holds."""
        return set(self._leases)

    def take(self, lease: Lease, request: Request) -> None:
        """Record that ``request`` (rebuilt from ``lease.payload``) is leased by this worker."""
        request.meta[LEASE_META] = lease.field
        self._leases[lease.field] = _Lease(
            request, lease.payload, request.meta.get("retry_times", 0), request.meta.get("redirect_times", 0)
        )

    def forget(self, field: bytes) -> None:
        """Drop a lease without acknowledging it (given back to the frontier, or reclaimed)."""
        self._leases.pop(field, None)

    def clear(self) -> None:
        self._leases.clear()

    def ack(self, field: bytes) -> None:
        self.to_ack.append(field)
        self.stats.inc_value("frontier/acked")

    def replaced(self, request: Request) -> str | None:
        """``request`` is being queued: when it is a retry or a redirect of a leased request (made
        by a downloader middleware, so meta is copied and ``retry_times`` or ``redirect_times``
        moved on), the parent's lease ends here. Returns ``"redirect"``, ``"retry"`` (which the
        parent was replaced by) or ``None``.

        A retry that sets ``dont_filter`` (Scrapy's ``get_retry_request`` does, so that the same
        URL passes the dupefilter) on a request that had it off is marked
        (:data:`RETRY_DONT_FILTER_META`): a redirect of the retry is deduplicated again, since
        ``dont_filter`` is otherwise copied onto redirects (scrapy#6895) and a page already
        crawled would be fetched and stored again."""
        self._offered = request
        parent = request.meta.get(LEASE_META)
        if parent is None:
            return None
        lease = self._leases.get(parent)
        if lease is None or lease.request is request:
            return None
        if request.meta.get("redirect_times", 0) != lease.redirect_times:
            kind = "redirect"
        elif request.meta.get("retry_times", 0) != lease.retry_times:
            kind = "retry"
            if request.dont_filter and not lease.request.dont_filter:
                request.meta[RETRY_DONT_FILTER_META] = True
        else:
            return None
        del self._leases[parent]
        self.ack(parent)
        return kind

    def handed_on(self, child: Request, parent: Request) -> None:
        """A downloader middleware answered ``parent`` with ``child`` and the engine has handed
        ``child`` on (:func:`scrapy_frontier.scrapy_internals.after_downloader_request`). Scrapy
        is done with ``parent``: when its lease is still held (``child`` did not end it in
        :meth:`replaced`), it is acknowledged. A ``child`` that never reached the scheduler was
        dropped by a ``request_scheduled`` handler (Scrapy's offsite filter, for a redirect to a
        host outside ``allowed_domains``): counted in ``frontier/dropped/before_scheduler``, the
        first one logged at INFO."""
        field = parent.meta.get(LEASE_META)
        lease = self._leases.get(field) if field is not None else None
        if field is None or lease is None or lease.request is not parent:
            return
        del self._leases[field]
        self.ack(field)
        if self._offered is child:
            return
        self.stats.inc_value("frontier/dropped/before_scheduler")
        level = logging.INFO if self._log_drops else logging.DEBUG
        self._log_drops = False
        logger.log(
            level,
            "Dropped before the scheduler (offsite, or another request_scheduled handler): %s, from %s; its "
            "lease is acknowledged (further drops: DEBUG, counted in frontier/dropped/before_scheduler)",
            child,
            parent,
        )

    def scraped(self, passthrough: Any, result: Any, request: Request) -> Any:
        """Scrapy is done with ``request``'s response or failure ``result``: acknowledge its lease,
        and keep a dead letter when it failed for good. Returns ``passthrough`` (a Deferred callback)."""
        field: bytes | None = request.meta.get(LEASE_META)
        lease = self._leases.pop(field, None) if field is not None else None
        if field is None or lease is None:
            return passthrough
        failed = request.meta.get(FAILED_META)
        if failed is None and isinstance(result, Failure) and result.check(IgnoreRequest):
            self._ignored(result, request)
        elif failed is None and isinstance(result, Failure):
            if result.check(*DOWNLOAD_CANCELLED):
                failed = self._cancelled(result, request)
            else:
                failed = failure_record("download_error", result)
        if failed is not None:
            self._dead_letter(lease.payload, request, failed)
        self.ack(field)
        return passthrough

    def _ignored(self, failure: Failure, request: Request) -> None:
        """A downloader middleware dropped ``request`` with ``IgnoreRequest`` (offsite, robots.txt,
        ...): counted in ``frontier/dropped/ignored``; the first of each reason (the exception's
        type and message, up to a quoted part such as a host) logged at INFO, as Scrapy's
        dupefilter logs its first duplicate."""
        self.stats.inc_value("frontier/dropped/ignored")
        message = failure.getErrorMessage()
        reason = f"{failure.type.__name__}: {message.split(chr(39), 1)[0].split(chr(34), 1)[0].strip()}"
        first = reason not in self._drop_reasons
        self._drop_reasons.add(reason)
        logger.log(
            logging.INFO if first else logging.DEBUG,
            "Dropped before its response reached the spider (%s: %s): %s; its lease is acknowledged (further "
            "drops of this kind: DEBUG, counted in frontier/dropped/ignored)",
            failure.type.__name__,
            message or "no reason given",
            request,
        )

    def _cancelled(self, failure: Failure, request: Request) -> dict[str, str]:
        """The dead letter of a download Scrapy cancelled: its body was over ``DOWNLOAD_MAXSIZE``
        (``download_maxsize`` in meta), said by its Content-Length or seen as it arrived (Scrapy's
        HTTP handler cancels then without a message: the reason is given here)."""
        record = failure_record("too_large", failure)
        if not failure.getErrorMessage():
            maxsize = request.meta.get("download_maxsize", self.maxsize)
            record["exception"] = (
                f"DownloadCancelledError: body larger than the download max size ({maxsize} bytes, DOWNLOAD_MAXSIZE)"
            )
        return record

    def callback_failed(self, failure: Failure, request: Request | None) -> None:
        """The spider's callback raised for ``request``: it fails for good when Scrapy is done with it."""
        if request is not None and LEASE_META in request.meta:
            request.meta[FAILED_META] = failure_record("callback_error", failure)

    def unreadable(self, lease: Lease, exc: Exception) -> None:
        """A leased payload cannot be rebuilt into a request: kept as a dead letter, acknowledged."""
        logger.error("Unreadable request in the frontier, kept in %s: %s", self.keys.failed, exc)
        self.to_fail.append(
            json.dumps(
                {
                    "reason": "unreadable",
                    "exception": str(exc)[:500],
                    "payload": lease.payload.decode("utf-8", "replace"),
                }
            )
        )
        self.ack(lease.field)
        self.stats.inc_value("frontier/failed/unreadable")

    def _dead_letter(self, payload: bytes, request: Request, failed: dict[str, Any]) -> None:
        record = {
            **failed,
            "attempts": request.meta.get("retry_times", 0) + 1,
            "url": request.url,
            "failed_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "node": self.node_id,
        }
        head = json.dumps(record, ensure_ascii=False)[:-1]
        self.to_fail.append(f'{head},"request":{payload.decode()}}}')
        self.stats.inc_value(f"frontier/failed/{failed['reason']}")
        logger.warning("Request failed for good (%s), kept in %s: %s", failed["reason"], self.keys.failed, request.url)
