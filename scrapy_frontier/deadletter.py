"""Where refused data goes instead of being lost: a Redis list in distributed mode, a JSON-lines
file otherwise. One record per refusal, JSON, with the reason and the data itself."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter

from scrapy_frontier.scrapy_compat import run_in_thread
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    from redis.asyncio import Redis

logger = logging.getLogger(__name__)


def item_record(item: Any, **extra: Any) -> dict[str, Any]:
    """``{"item_class": "crawler.items.Page", "item": {...}, "at": ISO 8601 UTC, **extra}``."""
    return {
        **extra,
        "item_class": f"{type(item).__module__}.{type(item).__qualname__}",
        "item": ItemAdapter(item).asdict(),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


class DeadLetters:
    """Append JSON records to ``key`` in Redis when ``redis`` is given, else to ``directory/<key>.jl``."""

    def __init__(self, redis: Redis | None, directory: str | Path = ".") -> None:
        self.redis = redis
        self.directory = Path(directory)

    async def push(self, key: str, records: list[dict[str, Any]]) -> None:
        lines = [json.dumps(r, ensure_ascii=False, default=str) for r in records]
        if not lines:
            return
        if self.redis is not None:
            try:
                await self.redis.lpush(key, *lines)
                return
            except Exception as exc:  # keep it on disk rather than lose it
                logger.error(
                    "Could not push %s to Redis list %s (%s); writing them to %s.jl",
                    plural(len(lines), "record"),
                    key,
                    exc,
                    key,
                )
        await run_in_thread(self._append, key, lines)

    def _append(self, key: str, lines: list[str]) -> None:
        path = self.directory / f"{key.replace(':', '.').replace('/', '_')}.jl"
        with path.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
