"""MySQL write-through speed: the storage pipeline alone, fed ~1 KB Page items.

Builds :class:`scrapy_frontier.pipelines.storage.StoragePipeline` from a crawler with this project's
settings (``MYSQL_URL`` pointing at a bench database, no ``REDIS_URL``), opens it, and calls its
``process_item`` for ITEMS distinct Page items (about 1 KB each once serialized), keeping
IN_FLIGHT of them waiting at once, as a crawl's scraper does; an item counts once its batch is
committed. Prints and returns items/s.

    python -m bench.storage [--items 100000] [--batch-size 200] [--in-flight 2000]
                            [--mysql mysql://root@127.0.0.1:3306/crawler_bench]

The database named in the URL is created at start and dropped at the end (it must not be one
you keep: the bench refuses names that do not end in ``_bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pymysql

from crawler.items import Page
from scrapy_frontier.storage.backends import parse_mysql_url

DEFAULT_MYSQL = "mysql://root@127.0.0.1:3306/crawler_bench"
_WORDS = "crawler frontier lease politeness fingerprint scheduler pipeline storage batch upsert".split()


def make_page(i: int, base: datetime) -> Page:
    """The ``i``-th bench Page: about 1 KB once stored (url, title, 500 characters of text, 4 links...)."""
    w = _WORDS
    text = " ".join(w[(i + k) % len(w)] for k in range(60))[:500]
    return Page(
        url=f"http://bench.example/section-{i % 97}/page-{i}.html",
        final_url=f"http://bench.example/section-{i % 97}/page-{i}.html",
        status=200,
        title=f"Page {i}: {w[i % len(w)]} and {w[(i * 7) % len(w)]}",
        description=f"Benchmark page number {i}, about {w[(i * 3) % len(w)]}.",
        language="en",
        headings=[[1, f"Page {i}"], [2, w[i % len(w)].title()], [2, w[(i + 5) % len(w)].title()]],
        text=text,
        links=[f"http://bench.example/section-{(i + k) % 97}/page-{i * 3 + k}.html" for k in range(4)],
        content_hash=f"{i:064x}",
        fetched_at=(base + timedelta(milliseconds=i)).isoformat(timespec="milliseconds"),
        depth=i % 5,
        latency_ms=i % 300,
    )


def row_bytes(page: Page) -> int:
    """Bytes of the row the pipeline writes for ``page`` (its values as the driver sends them)."""
    from scrapy_frontier.schema import schema_of, to_row

    return sum(len(str(v).encode()) for v in to_row(page, schema_of(page)) if v is not None)


def _mysqld_cpu() -> float | None:
    """CPU seconds (user + system) used so far by the local ``mariadbd``/``mysqld``, or None."""
    import os

    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name in ("mariadbd", "mysqld"):
            fields = stat[stat.rindex(")") + 2 :].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return None


def _server(url: str) -> pymysql.connections.Connection:
    params = parse_mysql_url(url)
    params.pop("database")
    return pymysql.connect(**params, charset="utf8mb4", autocommit=True)


def create_database(url: str) -> None:
    """Create the (empty) bench database of ``url``; refuses a name not ending in ``_bench``."""
    name = parse_mysql_url(url)["database"]
    if not name.endswith("_bench"):
        raise SystemExit(f"refusing to use database {name!r}: the bench drops it; use a name ending in _bench")
    conn = _server(url)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    conn.close()


def drop_database(url: str) -> None:
    name = parse_mysql_url(url)["database"]
    conn = _server(url)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()


def count_rows(url: str, table: str = "pages") -> int:
    params = parse_mysql_url(url)
    conn = pymysql.connect(**params, charset="utf8mb4")
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{table}`")
        (n,) = cur.fetchone()
    conn.close()
    return int(n)


async def _drive(url: str, items: int, batch_size: int | None, in_flight: int, dead_dir: str) -> dict[str, Any]:
    from scrapy import Spider
    from scrapy.utils.project import get_project_settings
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.pipelines.storage import StoragePipeline

    settings = get_project_settings()
    overrides: dict[str, Any] = {
        **{k: v for k, v in settings.copy_to_dict().items() if k not in ("REDIS_URL", "MYSQL_URL")},
        "TWISTED_REACTOR_ENABLED": False,
        "MYSQL_URL": url,
        "REDIS_URL": None,
        "DEAD_LETTER_DIR": dead_dir,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
    }
    if batch_size:
        overrides["STORAGE_BATCH_SIZE"] = batch_size
    crawler = get_crawler(type("site", (Spider,), {"name": "site"}), overrides)
    crawler.spider = crawler._create_spider()
    pipeline = StoragePipeline.from_crawler(crawler)
    await pipeline.open_spider()
    base = datetime(2026, 1, 1, tzinfo=UTC)
    pages = [make_page(i, base) for i in range(items)]
    size = sum(row_bytes(p) for p in pages[:1000]) / min(items, 1000)
    # The items made in advance are not the pipeline's: keep the garbage collector from walking
    # them again and again (its full collections would be charged to the pipeline).
    gc.collect()
    gc.freeze()
    started = time.perf_counter()
    cpu0 = time.process_time()
    main0 = time.thread_time()
    db0 = _mysqld_cpu()
    waiting = 0
    room = asyncio.Event()

    def done(task: asyncio.Future[Any]) -> None:
        nonlocal waiting
        waiting -= 1
        if waiting < in_flight:
            room.set()

    tasks = []
    for page in pages:
        if waiting >= in_flight:
            room.clear()
            await room.wait()
        waiting += 1
        task = asyncio.ensure_future(pipeline.process_item(page))
        task.add_done_callback(done)
        tasks.append(task)
    for result in await asyncio.gather(*tasks):
        assert result is not None
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    main_cpu = time.thread_time() - main0
    db_cpu = _mysqld_cpu() - db0 if db0 is not None else None
    await pipeline.close_spider()
    gc.unfreeze()
    stats = crawler.stats.get_stats()
    return {
        "items": items,
        "seconds": round(seconds, 3),
        "items_per_s": round(items / seconds, 1),
        "row_bytes": round(size),
        "cpu_us_per_item": round(cpu / items * 1e6, 1),
        "event_loop_cpu_us_per_item": round(main_cpu / items * 1e6, 1),
        "mysqld_cpu_us_per_item": round(db_cpu / items * 1e6, 1) if db_cpu is not None else None,
        "batch_size": pipeline.batch_size,
        "in_flight": in_flight,
        "written": stats.get("storage/written/pages", 0),
        "refused": stats.get("storage/refused", 0),
        "retries": stats.get("storage/retries", 0),
    }


def run(
    url: str = DEFAULT_MYSQL,
    items: int = 100_000,
    batch_size: int | None = None,
    in_flight: int = 2000,
    keep: bool = False,
) -> dict[str, Any]:
    """Write ``items`` Page items through the storage pipeline into a fresh bench database.

    Returns ``{"items", "seconds", "items_per_s", "row_bytes", "batch_size", "in_flight",
    "written", "refused", "retries", "rows"}`` (``rows``: rows in ``pages`` afterwards). The
    database is dropped afterwards unless ``keep``.
    """
    import tempfile

    create_database(url)
    try:
        with tempfile.TemporaryDirectory() as dead_dir:
            result = asyncio.run(_drive(url, items, batch_size, in_flight, dead_dir))
        result["rows"] = count_rows(url)
    finally:
        if not keep:
            drop_database(url)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=None, help="STORAGE_BATCH_SIZE (default: the project's)")
    parser.add_argument("--in-flight", type=int, default=2000, help="items waiting for their commit at once")
    parser.add_argument("--mysql", default=DEFAULT_MYSQL, help="database URL; the database is created and dropped")
    parser.add_argument("--keep", action="store_true", help="do not drop the database at the end")
    args = parser.parse_args()
    result = run(args.mysql, args.items, args.batch_size, args.in_flight, args.keep)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
