"""Start-URL intake: turning ``<spider>:start_urls`` payloads into requests. (The spider's own
start requests are deduplicated by the scheduler, so that each is fetched once per crawl.)

Payloads are taken from Redis under this worker's lease (:meth:`Frontier.take_start_urls`) and
acknowledged by the next flush, after the requests they made are queued: a worker that dies
between the two leaves them to be reclaimed, never lost.

A payload becomes a request through :func:`scrapy_frontier.serialize.parse_start_payload` (a URL
or a JSON object, checked), or, for a scrapy-redis ``RedisSpider`` / ``RedisCrawlSpider`` whose
class overrides ``make_request_from_data``, through that method, as scrapy-redis does. A payload
that makes no request is refused: logged, counted in ``start_urls/refused/<reason>`` and kept in
``<start urls key>:invalid`` as pushed (:meth:`StartUrlIntake.refuse`). A scrapy-redis spider's requests read by
:func:`parse_start_payload` are ``dont_filter`` unless the JSON payload says ``"dont_filter":
false``, as scrapy-redis's own ``make_request_from_data`` makes them: a pushed URL outside
``allowed_domains`` is fetched. Payloads are decoded with ``REDIS_ENCODING`` or the spider's
``redis_encoding``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scrapy import Request

from scrapy_frontier.scrapy_redis_compat import is_redis_spider
from scrapy_frontier.serialize import RequestRefused, parse_start_payload
from scrapy_frontier.wording import shown_payload

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)


def redis_spider_hook(spider: Spider) -> Callable[[bytes], Any] | None:
    """The ``make_request_from_data`` a scrapy-redis spider's own class defines, or ``None`` when
    the spider is not a scrapy-redis spider or keeps scrapy-redis's default (then payloads are
    read by :func:`parse_start_payload`, which checks them and accepts scrapy-redis's JSON form)."""
    method = getattr(type(spider), "make_request_from_data", None)
    if method is None or not hasattr(spider, "redis_key"):
        return None
    if (getattr(method, "__module__", "") or "").startswith("scrapy_redis."):
        return None
    return getattr(spider, "make_request_from_data")  # noqa: B009 (scrapy-redis's, not a Spider attribute)


class StartUrlIntake:
    """Builds requests from raw start-URL payloads for one spider."""

    def __init__(
        self, spider: Spider, stats: StatsCollector, node_id: str, max_bytes: int, encoding: str = "utf-8"
    ) -> None:
        self.spider = spider
        self.stats = stats
        self.node_id = node_id
        self.max_bytes = max_bytes
        #: The payloads' encoding (REDIS_ENCODING, or the spider's ``redis_encoding``).
        self.encoding = encoding
        self.hook = redis_spider_hook(spider)
        #: a scrapy-redis spider's start requests are dont_filter (its make_request_from_data's are)
        self.dont_filter = is_redis_spider(spider)

    def requests(self, raw: bytes) -> tuple[list[Request], dict[str, Any] | None]:
        """The requests of one payload, and its dead-letter record when it was refused."""
        if self.hook is not None:
            return self._from_hook(self.hook, raw)
        try:
            request, unknown = parse_start_payload(
                raw, self.spider, self.max_bytes, encoding=self.encoding, default_dont_filter=self.dont_filter
            )
        except RequestRefused as exc:  # any failure, as bad_payload: one never stops the batch
            return [], self.refuse(raw, exc)
        if unknown:
            logger.warning(
                "Start URL payload for %s: ignored unknown keys %s", request.url, ", ".join(map(repr, unknown))
            )
            self.stats.inc_value("start_urls/unknown_keys")
        return [request], None

    def _from_hook(self, hook: Callable[[bytes], Any], raw: bytes) -> tuple[list[Request], dict[str, Any] | None]:
        if len(raw) > self.max_bytes:
            return [], self.refuse(
                raw,
                RequestRefused(
                    "too_large", f"payload of {len(raw)} bytes is over REDIS_START_URLS_MAX_BYTES={self.max_bytes}"
                ),
            )
        try:
            made = hook(raw)
            requests = (
                [made]
                if isinstance(made, Request)
                else list(made)
                if isinstance(made, Iterable)
                else []
                if not made
                else [made]
            )
        except Exception as exc:
            return [], self.refuse(
                raw,
                RequestRefused(
                    "make_request_from_data",
                    f"{type(self.spider).__name__}.make_request_from_data raised {type(exc).__name__}: {exc}",
                ),
            )
        bad = [r for r in requests if not isinstance(r, Request)]
        if bad:
            return [], self.refuse(
                raw,
                RequestRefused(
                    "make_request_from_data",
                    f"{type(self.spider).__name__}.make_request_from_data returned {type(bad[0]).__name__}, not a "
                    "Request",
                ),
            )
        if not requests:
            # the spider's own choice (scrapy-redis logs it at DEBUG too): counted, not a dead letter
            logger.debug("Request not made from data: %s", shown_payload(raw))
            self.stats.inc_value("start_urls/no_request")
        return requests, None

    def refuse(self, raw: bytes, exc: RequestRefused) -> dict[str, Any]:
        """Log and count a refused start-URL payload; returns its dead-letter record, which keeps
        the payload as pushed (its first ``max_bytes`` bytes): ``payload``, the text, when it
        decodes with the encoding, else ``payload_base64``, the bytes."""
        logger.warning("Refused start URL payload %s (%s): %s", shown_payload(raw), exc.reason, exc)
        self.stats.inc_value(f"start_urls/refused/{exc.reason}")
        kept = raw[: self.max_bytes]
        try:
            payload = {"payload": kept.decode(self.encoding)}
        except (UnicodeDecodeError, LookupError):
            payload = {"payload_base64": base64.b64encode(kept).decode("ascii")}
        return {
            "reason": exc.reason,
            "detail": str(exc),
            **payload,
            "size": len(raw),
            "node": self.node_id,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
