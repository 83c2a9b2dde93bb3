"""``scrapy replay <spider>``: write the items kept in ``<spider>:items:pending`` to the database.

Items of the declared item types (``STORAGE_ITEM_TYPES``) and items without a schema (documents)
are written; a record naming any other class is refused (never imported) and kept in
``<spider>:items:invalid``, and why is printed on stderr."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from scrapy_frontier.config import read_value
from scrapy_frontier.connection import ConfigError, redact_url
from scrapy_frontier.redis_command import RedisCommand
from scrapy_frontier.schema import SchemaError
from scrapy_frontier.storage.backends import ConnectionLost, backend_for
from scrapy_frontier.storage.item_types import declared_item_types
from scrapy_frontier.storage.replay import replay_pending
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    import argparse

    import redis

    from scrapy_frontier.keys import Keys


class Command(RedisCommand):
    def short_desc(self) -> str:
        return "Write the items waiting in <spider>:items:pending to MySQL (or SQLite)"

    def execute(self, client: redis.Redis, keys: Keys, opts: argparse.Namespace) -> dict[str, Any] | None:
        assert self.settings is not None
        url = read_value(self.settings, "MYSQL_URL")
        node = f"replay:{os.getpid()}"
        backend = None
        try:
            types = declared_item_types(self.settings)
            backend = backend_for(self.settings)
            backend.connect()
            written, refused, problems = replay_pending(
                client, keys, node, backend, types, self.settings.get("STORAGE_DOCUMENT_KEY") or None
            )
        except SchemaError as exc:
            self._fail(exc.describe())
            return None
        except ConfigError as exc:
            self._fail(str(exc))
            return None
        except ConnectionLost as exc:
            self._fail(f"MYSQL_URL {redact_url(url)}: {exc}" if url else str(exc))
            return None
        except Exception as exc:  # e.g. MySQL 1142, no CREATE right: the batch is back in the pending list
            self._fail(
                f"{backend.name if backend else 'storage'}: {type(exc).__name__}: {exc}; the items stay in "
                f"{keys.items_pending}"
            )
            return None
        finally:
            if backend is not None:
                backend.close()
        for problem, count in problems.most_common():
            print(f"refused {plural(count, 'record')}: {problem}", file=sys.stderr)
        return {"written": written, "refused": refused, "left": client.llen(keys.items_pending)}

    def describe(self, result: dict[str, Any]) -> str:
        return (
            f"wrote {plural(result['written'], 'item')}; {result['refused']} refused (kept in "
            f"<spider>:items:invalid); {result['left']} left pending"
        )
