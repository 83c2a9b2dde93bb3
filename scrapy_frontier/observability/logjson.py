"""JSON logs (``LOG_JSON``): every log record becomes one JSON object on one line.

Built on python-json-logger (:class:`pythonjsonlogger.json.JsonFormatter`). Each object has

- ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message``;
- ``spider`` (the spider's name) and ``node`` (the node id of
  :func:`scrapy_frontier.nodes.node_id_of`, set in embedded mode too);
- ``url`` when the record concerns a request or response (Scrapy's "Crawled", "Scraped from",
  "Error downloading", "Spider error processing" lines) and ``item`` when it concerns an item
  (the label of :func:`scrapy_frontier.observability.logformatter.item_label`, ``Page(url='...')``);
- ``exc_info`` (the formatted traceback) when there is one, and any other ``extra`` a caller
  gave (values that are not JSON become their ``str()``).

The observability extension switches Scrapy's root handler to JSON when the crawler is built
(:func:`use_json_formatter`): the lines Scrapy logs before any add-on or extension loads (its
banner and versions) stay plain.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pythonjsonlogger.json import JsonFormatter
from scrapy.utils.log import get_scrapy_root_handler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings


@dataclass
class LogContext:
    """Fields added to every record that does not carry its own: ``spider`` (name), ``node``."""

    spider: str | None = None
    node: str | None = None


def _url_of(value: Any) -> str | None:
    url = getattr(value, "url", None)
    return url if isinstance(url, str) else None


class JsonLogFormatter(JsonFormatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, ``spider``,
    ``node``, then ``url`` / ``item`` where the record has one (see the module docstring)."""

    def __init__(self, context: LogContext) -> None:
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
        )
        self.context = context

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        log_data["time"] = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        super().add_fields(log_data, record, message_dict)
        spider = log_data.get("spider")
        if spider is not None and not isinstance(spider, str):
            spider = getattr(spider, "name", None) or str(spider)
        log_data["spider"] = spider or self.context.spider
        log_data["node"] = log_data.get("node") or self.context.node
        if not isinstance(log_data.get("crawler", ""), str):
            del log_data["crawler"]  # Scrapy's extra={"crawler": ...}: the node says which one
        args = record.args
        if isinstance(args, Mapping):
            for key in ("request", "src", "response"):
                url = _url_of(args.get(key))
                if url is not None:
                    log_data.setdefault("url", url)
                    break
            if "item" in args:
                item = args["item"]
                if not isinstance(item, str):
                    from scrapy_frontier.observability.logformatter import item_label

                    item = item_label(item)
                log_data["item"] = item


def use_json_formatter(crawler: Crawler, settings: BaseSettings | None = None) -> None:
    """Make the log JSON from now on: give Scrapy's root handler a :class:`JsonLogFormatter` for
    this crawler, at the crawl's ``LOG_LEVEL`` (``settings``: the crawler's, or those the add-on
    is updating), and keep Scrapy from replacing that handler with a plain one when the crawl
    starts (:func:`~scrapy_frontier.scrapy_internals.keep_root_handler`)."""
    from scrapy_frontier import scrapy_internals
    from scrapy_frontier.nodes import node_id_of

    handler = get_scrapy_root_handler()
    if handler is not None:
        handler.setFormatter(JsonLogFormatter(LogContext(crawler.spidercls.name, node_id_of(crawler))))
        handler.setLevel((settings or crawler.settings).get("LOG_LEVEL"))
        scrapy_internals.keep_root_handler()
