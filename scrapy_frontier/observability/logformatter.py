"""Log lines for items that name the item by its key instead of dumping it (a Page's text can be
megabytes). Scrapy's LogFormatter: https://docs.scrapy.org/en/latest/topics/logging.html#custom-log-formats"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import logformatter

from scrapy_frontier.schema import item_values, schema_of

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.http import Response
    from twisted.python.failure import Failure


def item_label(item: Any) -> str:
    """``Page(url='https://...')``: the item's class and unique key, short enough for one log line."""
    try:
        schema = schema_of(item)
    except Exception:
        schema = None
    name = type(item).__name__
    if schema is None:
        return name
    value = str(item_values(item).get(schema.unique_key, ""))
    return f"{name}({schema.unique_key}={value[:200]!r})"


def _labelled(result: logformatter.LogFormatterResult, item: Any) -> logformatter.LogFormatterResult:
    """``result`` with its ``item`` argument replaced by :func:`item_label` (Scrapy's item lines
    give their arguments by name)."""
    args = result["args"]
    if isinstance(args, dict):
        args["item"] = item_label(item)
    return result


class LogFormatter(logformatter.LogFormatter):
    def scraped(
        self, item: Any, response: Response | Failure | None, spider: Spider
    ) -> logformatter.LogFormatterResult:
        return _labelled(super().scraped(item, response, spider), item)

    def dropped(
        self, item: Any, exception: BaseException, response: Response | Failure | None, spider: Spider
    ) -> logformatter.LogFormatterResult:
        result = super().dropped(item, exception, response, spider)
        result["msg"] = "Dropped %(item)s: %(exception)s"
        return _labelled(result, item)

    def item_error(
        self, item: Any, exception: BaseException, response: Response | Failure | None, spider: Spider
    ) -> logformatter.LogFormatterResult:
        return _labelled(super().item_error(item, exception, response, spider), item)
