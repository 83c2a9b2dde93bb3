"""Validation: every item with a schema (:mod:`scrapy_frontier.schema`) is checked before it is cached or stored."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DropItem, NotConfigured

from scrapy_frontier.config import read_setting
from scrapy_frontier.connection import optional_shared_redis
from scrapy_frontier.deadletter import DeadLetters, item_record
from scrapy_frontier.keys import Keys
from scrapy_frontier.observability.logformatter import item_label
from scrapy_frontier.schema import SchemaError, ValidationError, validate
from scrapy_frontier.scrapy_compat import pipeline_hook

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class ItemRefused(DropItem):
    """An item dropped because it cannot be stored.

    ``reason`` is a short stat word: a :class:`~scrapy_frontier.schema.ValidationError` reason
    (``missing``, ``type``, ``too_long``, ...), ``schema`` for an item class whose schema cannot
    be stored, ``storage_refused`` for a row the database refused. ``field`` names the field at
    fault, or is ``None``.
    """

    def __init__(self, message: str, reason: str, field: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field


class ValidationPipeline:
    """Drop items that break their schema, truncate over-long ``truncate`` fields.

    A dropped item raises :class:`ItemRefused` (logged with the field and the reason), is counted as
    ``validation/dropped/<reason>`` and kept as JSON in ``<spider>:items:invalid`` (Redis) or
    ``<spider>.items.invalid.jl`` (embedded mode). Truncations are counted as
    ``validation/truncated/<field>``.
    """

    def __init__(self, crawler: Crawler) -> None:
        if not read_setting(crawler, "VALIDATION_ENABLED"):
            raise NotConfigured("VALIDATION_ENABLED is off")
        self.crawler = crawler
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ValidationPipeline:
        return cls(crawler)

    @pipeline_hook
    async def open_spider(self) -> None:
        spider = self.crawler.spider
        assert spider is not None  # called with the spider open
        self.key = Keys.for_spider(self.crawler.settings, spider.name).items_invalid
        redis = optional_shared_redis(self.crawler)
        self.dead = DeadLetters(redis, self.crawler.settings.get("DEAD_LETTER_DIR", "."))

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        try:
            truncated = validate(item)
        except (ValidationError, SchemaError) as exc:
            field, reason = exc.field, exc.reason if isinstance(exc, ValidationError) else "schema"
            self.stats.inc_value(f"validation/dropped/{reason}")
            await self.dead.push(self.key, [item_record(item, field=field, reason=reason, detail=str(exc))])
            raise ItemRefused(f"invalid field {field!r} ({reason}): {exc}; kept in {self.key}", reason, field) from None
        for field in truncated:
            self.stats.inc_value(f"validation/truncated/{field}")
            logger.warning("Truncated field %r of %s to fit its column", field, item_label(item))
        return item
