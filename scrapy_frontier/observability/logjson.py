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

``scrapy crawl`` installs it before Scrapy logs its first line (:func:`install_early`, from
:mod:`scrapy_frontier.commands.crawl`), so the whole log is JSON; records logged before the crawler
exists (Scrapy's banner and versions) are held and written as soon as the node id is known.
Elsewhere (a script running a ``CrawlerProcess``) the observability extension switches the root
handler to JSON when the crawler is built (:func:`use_json_formatter`): the lines before it
stay plain.
"""

from __future__ import annotations

import atexit
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TextIO

from pythonjsonlogger.json import JsonFormatter
from scrapy.settings import BaseSettings
from scrapy.utils.log import TopLevelFormatter, get_scrapy_root_handler

from scrapy_frontier.config import read_value

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

#: Records held at most before the node id is known (then they are written without it).
_HOLD_MAX = 1000


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


class JsonLogHandler(logging.StreamHandler):
    """A stream handler with :class:`JsonLogFormatter` that, while ``hold`` is on and the node id
    is unknown, keeps records back; :meth:`write_held` writes them. Closing it never closes the
    stream (Scrapy's ``configure_logging`` closes every existing handler)."""

    def __init__(self, stream: TextIO, context: LogContext, *, hold: bool = False) -> None:
        super().__init__(stream)
        self.context = context
        self.setFormatter(JsonLogFormatter(context))
        self._held: list[logging.LogRecord] | None = [] if hold else None

    def emit(self, record: logging.LogRecord) -> None:
        if self._held is not None and self.context.node is None and len(self._held) < _HOLD_MAX:
            self._held.append(record)
            return
        self.write_held()
        super().emit(record)

    def write_held(self) -> None:
        """Stop holding records back and write those held (with the context known now)."""
        held, self._held = self._held, None
        for record in held or ():
            super().emit(record)


_early: JsonLogHandler | None = None


def install_early(settings: BaseSettings, spider: str | None) -> bool:
    """For ``scrapy crawl``, before the ``CrawlerProcess`` exists: when ``LOG_JSON`` is on (and
    ``LOG_ENABLED``), put a :class:`JsonLogHandler` on the root logger (to ``LOG_FILE`` or
    stderr, at ``LOG_LEVEL``) and set ``LOG_INSTALL_ROOT_HANDLER`` off so Scrapy does not add
    its plain one. Returns whether it did. Raises ValueError for a bad ``LOG_JSON``."""
    global _early
    if not read_value(settings, "LOG_JSON") or not settings.getbool("LOG_ENABLED"):
        return False
    stream: TextIO = sys.stderr
    filename = settings.get("LOG_FILE")
    if filename:
        mode: Literal["a", "w"] = "a" if settings.getbool("LOG_FILE_APPEND") else "w"
        stream = open(filename, mode, encoding=settings.get("LOG_ENCODING") or "utf-8", errors="backslashreplace")  # noqa: SIM115
    handler = JsonLogHandler(stream, LogContext(spider=spider), hold=True)
    handler.setLevel(settings.get("LOG_LEVEL"))
    if settings.getbool("LOG_SHORT_NAMES"):
        handler.addFilter(TopLevelFormatter(["scrapy"]))
    if _early is not None:
        logging.root.removeHandler(_early)
    _early = handler
    logging.root.setLevel(logging.NOTSET)
    logging.root.addHandler(handler)
    settings.set("LOG_INSTALL_ROOT_HANDLER", False, priority="cmdline")
    atexit.register(handler.write_held)
    return True


def set_crawler(crawler: Crawler) -> None:
    """Tell the early handler (if any) the crawler's spider and node id, apply the crawler's
    ``LOG_LEVEL`` (a spider's ``custom_settings`` may change it) and write the held records."""
    if _early is None:
        return
    from scrapy_frontier.nodes import node_id_of

    _early.context.spider = crawler.spidercls.name
    _early.context.node = node_id_of(crawler)
    _early.setLevel(crawler.settings.get("LOG_LEVEL"))
    _early.write_held()


def use_json_formatter(crawler: Crawler) -> None:
    """Make the log JSON from now on when ``scrapy crawl`` has not already: give Scrapy's root
    handler a :class:`JsonLogFormatter` for this crawler."""
    from scrapy_frontier.nodes import node_id_of

    if _early is not None and _early in logging.root.handlers:
        return
    handler = get_scrapy_root_handler()
    if handler is not None:
        handler.setFormatter(JsonLogFormatter(LogContext(crawler.spidercls.name, node_id_of(crawler))))
