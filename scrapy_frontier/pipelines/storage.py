"""Write-through storage: every item is upserted into MySQL (``MYSQL_URL``) or, when that is not
set, an SQLite file (``SQLITE_PATH``): an item whose type declares a schema into its own table,
created when the first item of the type comes; any other item (a dict, a class without
``table``) as a JSON document into the table ``items`` (:data:`scrapy_frontier.schema.DOCUMENTS`),
keyed by its ``STORAGE_DOCUMENT_KEY`` field or by its content. The item types
``STORAGE_ITEM_TYPES`` declares have their schemas checked when the crawl starts.

Items are written by group commit on one worker thread, never on the reactor: a batch is written
as soon as the writer is free, and the items arriving while it writes make the next batch (at
most ``STORAGE_BATCH_SIZE`` items; ``STORAGE_FLUSH_INTERVAL`` seconds, default 0, makes the
first item of a batch wait that long for others). With the Redis cache pipeline on, a batch
first waits for its items' cache answers and skips the items the cache found unchanged since
their last commit. ``process_item``
returns only once its item is committed, so Scrapy - and the frontier's lease - sees a page as
done only when its items are durable. A lost connection is retried with backoff without losing
the batch; after ``STORAGE_RETRY_TIMEOUT`` seconds the batch is kept in ``<spider>:items:pending``
(Redis) or ``<spider>.items.pending.jl``. A row the server refuses (e.g. MySQL error 1406, data
too long) is kept in ``<spider>:items:invalid`` and does not take the rest of its batch with it.
A connection the server closed while idle is opened again quietly, and a table dropped during
the crawl is created again (:mod:`scrapy_frontier.storage.backends`). ``CONCURRENT_ITEMS``
below 1 stops the crawl at start: Scrapy would drop every item.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy.exceptions import NotConfigured

from scrapy_frontier.config import fail_at_open, failed_at_open, read_setting, read_value
from scrapy_frontier.connection import (
    ConfigError,
    optional_shared_redis,
    redact_url,
    sync_redis,
)
from scrapy_frontier.deadletter import DeadLetters, item_record
from scrapy_frontier.keys import keys_of
from scrapy_frontier.nodes import node_id_of
from scrapy_frontier.pipelines.cache import RedisCachePipeline
from scrapy_frontier.pipelines.validation import ItemRefused
from scrapy_frontier.redis_health import redis_health
from scrapy_frontier.schema import (
    DOCUMENTS,
    SchemaError,
    document_of,
    schema_of,
    to_row,
    type_name,
)
from scrapy_frontier.scrapy_compat import get_item_pipeline, pipeline_hook, send_signal
from scrapy_frontier.signals import item_unchanged, items_stored
from scrapy_frontier.storage.backends import ConnectionLost, backend_for
from scrapy_frontier.storage.item_types import declared_item_types
from scrapy_frontier.storage.replay import replay_pending
from scrapy_frontier.wording import plural

if TYPE_CHECKING:
    import redis
    from scrapy.crawler import Crawler

    from scrapy_frontier.schema import Schema

logger = logging.getLogger(__name__)

#: A waiting item: (schema, item, row, its SQL literal from the backend or None, future set once committed).
_Entry = tuple["Schema", Any, tuple[Any, ...], Any, "asyncio.Future[None] | None"]

#: Seconds between two looks at ``<spider>:items:pending`` while items flow.
REPLAY_EVERY = 30.0
#: Most unchanged-item marks kept for items not seen yet (see ``StoragePipeline._on_unchanged``).
UNCHANGED_MAX = 10_000


class StoragePipeline:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not read_setting(crawler, "STORAGE_ENABLED"):
            raise NotConfigured("STORAGE_ENABLED is off")
        self.batch_size = read_setting(crawler, "STORAGE_BATCH_SIZE")
        self.flush_interval = read_setting(crawler, "STORAGE_FLUSH_INTERVAL")
        self.retry_timeout = read_setting(crawler, "STORAGE_RETRY_TIMEOUT")
        self.mysql_url = read_value(settings, "MYSQL_URL")
        self.document_key = settings.get("STORAGE_DOCUMENT_KEY") or None
        if self.document_key is not None and not isinstance(self.document_key, str):
            fail_at_open(crawler, "Setting STORAGE_DOCUMENT_KEY=%r is not a field name", self.document_key)
            self.document_key = None
        #: The declared item types by name (``STORAGE_ITEM_TYPES``), read at open.
        self.types: dict[str, type] = {}
        #: Names of the item types without a schema seen so far (the first item of each is logged).
        self._document_types: set[str] = set()
        self.crawler = crawler
        self.stats = crawler.stats
        #: (schema, item, row, its SQL literal or None, future set once the row is committed), in arrival order.
        self._batch: list[_Entry] = []
        #: Items the cache found unchanged since their last commit, by id (held, so that an id
        #: is not reused while it is here), until their batch skips them.
        self._unchanged: dict[int, Any] = {}
        #: The Redis cache pipeline of this crawl, if any: a batch is written once its items'
        #: cache writes are answered (:meth:`RedisCachePipeline.settled`).
        self._cache: RedisCachePipeline | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: A flush task is scheduled and has not taken its batch yet: the items arriving
        #: meanwhile ride with it, so a burst of items never queues a task per item.
        self._flush_queued = False
        self._lock = asyncio.Lock()
        self._tables: set[str] = set()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="storage")
        #: A blocking client for the replays of ``<spider>:items:pending`` (distributed mode, from open).
        self._sync_redis: redis.Redis | None = None
        self._replay_wanted = False
        self._next_replay = 0.0
        crawler.signals.connect(self._on_unchanged, item_unchanged)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StoragePipeline:
        return cls(crawler)

    def _on_unchanged(self, item: Any) -> None:
        if len(self._unchanged) >= UNCHANGED_MAX:
            # Only items some later pipeline dropped before storage stay here: forgetting them
            # costs at most a rewrite of an unchanged item.
            self._unchanged.clear()
        self._unchanged[id(item)] = item

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @pipeline_hook
    async def open_spider(self) -> None:
        self.keys = keys_of(self.crawler)
        redis = optional_shared_redis(self.crawler)
        self.dead = DeadLetters(redis, self.crawler.settings.get("DEAD_LETTER_DIR", "."))
        if failed_at_open(self.crawler):
            return  # a setting already stops the crawl (its one line is logged): connect to nothing
        try:
            self.types = declared_item_types(self.crawler.settings)
        except SchemaError as exc:
            fail_at_open(self.crawler, "%s (docs/items.md lists the schema keys)", exc.describe())
            return
        except ConfigError as exc:
            fail_at_open(self.crawler, "%s", exc)
            return
        try:
            self.backend = backend_for(self.crawler.settings)
            await self._in_thread(self.backend.connect)
        except ConfigError as exc:
            fail_at_open(self.crawler, "%s", exc)
            return
        except ConnectionLost as exc:
            fail_at_open(self.crawler, "MYSQL_URL %s: cannot connect (%s)", redact_url(self.mysql_url), exc)
            return
        logger.info("Storing items in %s", self.backend.name)
        self._cache = self._find_cache()
        # A crawl a setting stops at open writes nothing to Redis (its keys may not be known yet).
        self._sync_redis = (
            sync_redis(self.crawler.settings) if redis is not None and not failed_at_open(self.crawler) else None
        )
        await self._replay()

    def _find_cache(self) -> RedisCachePipeline | None:
        """The Redis cache pipeline among this crawl's item pipelines, if it runs."""
        try:
            return get_item_pipeline(self.crawler, RedisCachePipeline)
        except RuntimeError:  # no engine: the pipeline used on its own
            return None

    async def _replay(self) -> None:
        """Write the items other batches left in ``<spider>:items:pending`` (see
        :func:`scrapy_frontier.storage.replay.replay_pending`); runs on the storage thread."""
        self._next_replay = time.monotonic() + REPLAY_EVERY
        if self._sync_redis is None:
            return
        try:
            written, refused, problems = await self._in_thread(
                replay_pending,
                self._sync_redis,
                self.keys,
                node_id_of(self.crawler),
                self.backend,
                self.types,
                self.document_key,
                self.batch_size,
            )
        except (ConnectionLost, RedisError, OSError) as exc:
            if isinstance(exc, RedisError) and redis_health(self.crawler).failed(exc):
                return  # an outage, or Redis out of memory: reported once for the worker; replayed later
            logger.warning("Could not replay pending items yet (%s)", exc)
            return
        except Exception as exc:  # the batch is back in the pending list; the crawl goes on
            logger.error(
                "Replaying pending items failed (%s: %s); they stay in %s",
                type(exc).__name__,
                exc,
                self.keys.items_pending,
            )
            return
        if written or refused:
            self.stats.inc_value("storage/replayed", written)
            self.stats.inc_value("storage/refused", refused)
            logger.warning(
                "Replayed %s from %s (%d refused, kept in %s)",
                plural(written, "pending item"),
                self.keys.items_pending,
                refused,
                self.keys.items_invalid,
            )
            for problem, count in problems.most_common(5):
                logger.warning("%s refused: %s", plural(count, "pending item"), problem)

    async def _ensure_table(self, schema: Schema) -> None:
        if schema.table not in self._tables:
            await self._in_thread(self.backend.ensure_table, schema)
            self._tables.add(schema.table)

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        try:
            schema = schema_of(item)
        except (
            SchemaError
        ) as exc:  # a class STORAGE_ITEM_TYPES does not declare (the validation pipeline drops it first)
            raise ItemRefused(f"invalid field {exc.field!r} (schema): {exc}", "schema", exc.field) from None
        is_document = schema is None
        if schema is None:
            schema = DOCUMENTS
        try:
            # Built here rather than when the batch is written, so that it overlaps the database's
            # work on the batch before (the storage thread waits on the socket meanwhile); the
            # literal is pymysql's escaping of the row (only reads the connection's settings).
            row = self._document_row(item) if is_document else to_row(item, schema)
            literal = self.backend.literal(row)
        except Exception as exc:  # a row that cannot be built is kept, as a failed batch would be
            logger.exception(
                "Storage cannot write an item of %s; keeping it in %s", schema.table, self.keys.items_pending
            )
            await self._spill([(schema, item, (), None, None)], f"storage error: {exc}")
            return item
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._batch.append((schema, item, row, literal, done))
        if len(self._batch) >= self.batch_size or not self.flush_interval:
            # Group commit: the flush task runs once this moment's other items have joined the
            # batch (those of the same response, of responses parsed together) or, while a batch
            # is being written, takes everything that arrived meanwhile.
            self._kick()
        elif self._timer is None and not self._flush_queued:
            self._timer = asyncio.get_running_loop().call_later(self.flush_interval, self._kick)
        await done
        return item

    def _document_row(self, item: Any) -> tuple[Any, ...]:
        """The row of an item without a schema in the documents table; the first of its type is logged."""
        document = document_of(item, self.document_key)
        if document.item_type not in self._document_types:
            self._document_types.add(document.item_type)
            keyed = (
                f"their field {self.document_key!r} (STORAGE_DOCUMENT_KEY), else by a hash of their content"
                if self.document_key
                else "a hash of their content (STORAGE_DOCUMENT_KEY names a key field)"
            )
            logger.info(
                "Items of type %s have no schema: storing them as JSON documents in table %r, keyed by %s."
                " To give them a table of their own, declare a schema on the type (docs/items.md)",
                document.item_type,
                DOCUMENTS.table,
                keyed,
            )
        return document.row(self.keys.spider)

    def _kick(self) -> None:
        """Have the waiting items flushed as soon as the writer is free (at most one flush task
        waits for the lock; it takes the items that arrive until it runs)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._flush_queued:
            self._flush_queued = True
            asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self._lock:
            self._flush_queued = False
            batch, self._batch = self._batch[: self.batch_size], self._batch[self.batch_size :]
            if self._batch:
                self._kick()  # written right after this batch, as one batch however many arrive meanwhile
            if self._cache is not None:
                await self._cache.settled()  # usually at once: the cache's answers arrive first
                batch = self._skip_unchanged(batch)
            if not batch:
                return
            try:
                await self._write(batch)
            except Exception as exc:
                logger.exception(
                    "Storage failed for a batch of %s; keeping them in %s",
                    plural(len(batch), "item"),
                    self.keys.items_pending,
                )
                await self._spill(batch, f"storage error: {exc}")
            if self._replay_wanted or time.monotonic() > self._next_replay:
                self._replay_wanted = False
                await self._replay()

    def _skip_unchanged(self, batch: list[_Entry]) -> list[_Entry]:
        """The entries to write: those the cache did not find unchanged (the others are done)."""
        if not self._unchanged:
            return batch
        kept = []
        for entry in batch:
            if self._unchanged.pop(id(entry[1]), None) is None:
                kept.append(entry)
                continue
            self.stats.inc_value("storage/skipped/unchanged")
            done = entry[4]
            if done is not None and not done.done():
                done.set_result(None)
        return kept

    async def _write(self, batch: list[_Entry]) -> None:
        by_table: dict[str, list[_Entry]] = {}
        for entry in batch:
            by_table.setdefault(entry[0].table, []).append(entry)
        for entries in by_table.values():
            schema = entries[0][0]
            rows = [entry[2] for entry in entries]
            refused = await self._write_rows(schema, rows, [entry[3] for entry in entries], entries)
            if refused is None:
                continue
            refused_at = dict(refused)
            bad = []
            stored = [entry[1] for i, entry in enumerate(entries) if i not in refused_at]
            for i, (_, item, _, _, done) in enumerate(entries):
                if i in refused_at:
                    reason = refused_at[i]
                    logger.error(
                        "%s refused an item of %s (%s); kept in %s",
                        self.backend.name,
                        schema.table,
                        reason,
                        self.keys.items_invalid,
                    )
                    self.stats.inc_value("storage/refused")
                    bad.append(item_record(item, reason="storage_refused", detail=reason))
                    if done is not None and not done.done():
                        done.set_exception(ItemRefused(f"the database refused it: {reason}", "storage_refused"))
                elif done is not None and not done.done():
                    done.set_result(None)
            if stored:
                self.stats.inc_value(f"storage/written/{schema.table}", len(stored))
            # After the items are released: they are committed, and the cache's stored-hash
            # marks (a Redis round trip) need not hold their responses. Still under the lock,
            # so marks are made in commit order; a mark lost in a crash only costs a rewrite.
            await send_signal(self.crawler, items_stored, items=stored)
            await self.dead.push(self.keys.items_invalid, bad)

    async def _write_rows(
        self, schema: Schema, rows: list[tuple[Any, ...]], literals: list[Any], entries: list[Any]
    ) -> list[tuple[int, str]] | None:
        """Upsert, retrying lost connections with backoff; returns the refused rows, or None if
        the batch was kept in the pending list after ``STORAGE_RETRY_TIMEOUT``."""
        started = time.monotonic()
        delay = 0.5
        logged = False
        while True:
            try:
                await self._ensure_table(schema)
                refused = await self._in_thread(self.backend.upsert, schema, rows, literals)
                if logged:
                    logger.warning("%s is back after %.1fs", self.backend.name, time.monotonic() - started)
                    self._replay_wanted = True
                return refused
            except ConnectionLost as exc:
                self.stats.inc_value("storage/retries")
                self._tables.discard(schema.table)
                if not logged:
                    logger.error(
                        "%s unreachable (%s); retrying the batch of %d items", self.backend.name, exc, len(rows)
                    )
                    logged = True
                if time.monotonic() - started > self.retry_timeout:
                    await self._spill(entries, str(exc))
                    return None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                try:
                    await self._in_thread(self.backend.connect)
                except (ConnectionLost, ConfigError):
                    pass

    async def _spill(self, entries: list[Any], reason: str) -> None:
        records = [self._pending_record(entry, reason) for entry in entries]
        await self.dead.push(self.keys.items_pending, records)
        self.stats.inc_value("storage/pending", len(records))
        logger.error("Kept %s in %s to be replayed later", plural(len(records), "item"), self.keys.items_pending)
        for *_, done in entries:
            if done is not None and not done.done():
                done.set_result(None)

    @staticmethod
    def _pending_record(entry: _Entry, reason: str) -> dict[str, Any]:
        """The record of an item kept in the pending list. An item stored as a document is marked
        with ``document_type`` and, when its row was built, carries the document's own values
        (the JSON it was to be stored as), so that its replay stores the same document."""
        schema, item, row = entry[0], entry[1], entry[2]
        if schema is not DOCUMENTS:
            return item_record(item, reason=reason)
        record = item_record(item, reason=reason, document_type=type_name(type(item)))
        if row:
            record["item"] = json.loads(row[-1])
        return record

    @pipeline_hook
    async def close_spider(self) -> None:
        while self._batch:
            await self._flush()
        if hasattr(self, "backend"):
            await self._in_thread(self.backend.close)
        if self._sync_redis is not None:
            self._sync_redis.close()
        self._executor.shutdown(wait=False)
