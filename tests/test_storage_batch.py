"""The MySQL write path built for speed, on the real MariaDB: multi-row statements whose literals
the backend writes itself, bursts written as full batches, a row that cannot be built kept aside."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from crawler.items import Page
from scrapy_frontier.schema import schema_of, to_row

#: Every character pymysql escapes, SQL's own specials, a format marker and non-BMP text.
NASTY = "a\0b\\c\nd\re\x1af'g\"h%si%%j`k;-- l\\'m 🕷️ 𝄞 é"


def page(i: int, **fields) -> Page:
    values = dict(
        url=f"http://h/{i}",
        status=200,
        title=f"t{i}",
        content_hash=f"{i:064x}",
        fetched_at=datetime(2026, 1, 1, 12, 0, 0, i % 1000, tzinfo=UTC).isoformat(),
    )
    values.update(fields)
    return Page(**values)


def read_back(mysql_query):
    rows = mysql_query(
        "SELECT url, title, text, links, headings, fetched_at, depth, description FROM pages ORDER BY id"
    )
    return {r[0]: r[1:] for r in rows}


@pytest.mark.parametrize("no_backslash_escapes", [False, True], ids=["default", "NO_BACKSLASH_ESCAPES"])
def test_every_character_survives_the_multi_row_insert(backend, mysql_query, no_backslash_escapes):
    if no_backslash_escapes:
        with backend.conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
    schema = schema_of(Page)
    items = [
        page(1, title=NASTY, text=NASTY * 3, links=[f"http://h/{NASTY}"], headings=[[1, NASTY]], depth=0),
        page(2, title="plain", description=None, depth=7),
        page(3, title="'", text="\\", links=[], headings=[]),
    ]
    assert backend.upsert(schema, [to_row(item, schema) for item in items]) == []
    rows = read_back(mysql_query)
    assert rows["http://h/1"][:4] == (
        NASTY,
        NASTY * 3,
        json.dumps([f"http://h/{NASTY}"], ensure_ascii=False, separators=(",", ":")),
        json.dumps([[1, NASTY]], ensure_ascii=False, separators=(",", ":")),
    )
    assert rows["http://h/1"][4] == datetime(2026, 1, 1, 12, 0, 0, 1)  # microseconds kept
    assert rows["http://h/2"][0] == "plain" and rows["http://h/2"][5] == 7 and rows["http://h/2"][6] is None
    assert rows["http://h/3"][:2] == ("'", "\\")


def test_a_batch_longer_than_one_statement_is_one_transaction(backend, mysql_query, monkeypatch):
    """A batch split over several INSERT statements commits as a whole, and a row the server
    refuses in a later statement spares the rows of the earlier ones (written one by one)."""
    import scrapy_frontier.storage.backends

    monkeypatch.setattr(scrapy_frontier.storage.backends, "MAX_STATEMENT_CHARS", 2000)  # a few rows a statement
    schema = schema_of(Page)
    rows = [to_row(page(i, text="x" * 500), schema) for i in range(12)]
    assert backend.upsert(schema, rows) == []
    assert mysql_query("SELECT COUNT(*) FROM pages")[0][0] == 12
    rows = [to_row(page(i, text="y" * 500), schema) for i in range(12, 24)]
    rows[10] = to_row(page(22, title="T" * 5000), schema)  # over the title column: error 1406
    refused = backend.upsert(schema, rows)
    assert [i for i, _ in refused] == [10]
    assert mysql_query("SELECT COUNT(*) FROM pages")[0][0] == 23


async def _burst(mysql_url: str, dead_dir: str, items: list[Page], flush_interval: float = 3600) -> tuple[int, dict]:
    """Feed ``items`` to a StoragePipeline all at once; return the INSERT statements its
    connection ran (MariaDB's session counter) and the pipeline's stats."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.pipelines.storage import StoragePipeline

    crawler = get_crawler(
        type("site", (Spider,), {"name": "site"}),
        {
            "TWISTED_REACTOR_ENABLED": False,
            "MYSQL_URL": mysql_url,
            "DEAD_LETTER_DIR": dead_dir,
            "STORAGE_BATCH_SIZE": 200,
            "STORAGE_FLUSH_INTERVAL": flush_interval,
        },
    )
    crawler.spider = crawler._create_spider()
    pipeline = StoragePipeline.from_crawler(crawler)
    await pipeline.open_spider()
    # A flush interval of an hour: a batch left waiting for the timer fails here, not after an hour.
    results = await asyncio.wait_for(asyncio.gather(*(pipeline.process_item(item) for item in items)), 120)
    assert results == items
    with pipeline.backend.conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
        inserts = int(cur.fetchone()[1])
    await pipeline.close_spider()
    return inserts, crawler.stats.get_stats()


@pytest.mark.parametrize("n, statements", [(1000, 5), (1001, 6)])
def test_a_burst_of_items_is_written_in_full_batches(mysql_url, mysql_query, tmp_path, n, statements):
    """Items arriving together are written as full batches right away (no wait for the flush
    interval, an hour here), each as one INSERT."""
    inserts, stats = asyncio.run(_burst(mysql_url, str(tmp_path), [page(i) for i in range(n)]))
    assert inserts == statements
    assert stats["storage/written/pages"] == n
    assert mysql_query("SELECT COUNT(*) FROM pages")[0][0] == n


def test_an_item_whose_row_cannot_be_built_is_kept_and_spares_the_others(mysql_url, mysql_query, tmp_path):
    """Without the validation pipeline, a list holding a set cannot become JSON: that item goes to
    the pending items (here the file, no Redis), the others are stored."""
    items = [page(i) for i in range(5)]
    items[2]["links"] = [{"not", "json"}]
    inserts, stats = asyncio.run(_burst(mysql_url, str(tmp_path), items, flush_interval=0.2))
    assert stats["storage/written/pages"] == 4
    assert stats["storage/pending"] == 1
    assert sorted(r[0] for r in mysql_query("SELECT url FROM pages")) == [
        "http://h/0",
        "http://h/1",
        "http://h/3",
        "http://h/4",
    ]
    [kept] = [json.loads(line) for line in (tmp_path / "site.items.pending.jl").read_text().splitlines()]
    assert kept["item"]["url"] == "http://h/2" and "not JSON serializable" in kept["reason"]


async def _group_commit(mysql_url: str, dead_dir: str) -> tuple[int, dict]:
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.pipelines.storage import StoragePipeline

    crawler = get_crawler(
        type("site", (Spider,), {"name": "site"}),
        {"TWISTED_REACTOR_ENABLED": False, "MYSQL_URL": mysql_url, "DEAD_LETTER_DIR": dead_dir},
    )
    crawler.spider = crawler._create_spider()
    pipeline = StoragePipeline.from_crawler(crawler)
    await pipeline.open_spider()
    first = asyncio.ensure_future(pipeline.process_item(page(0)))
    for _ in range(100):  # until the lone item's batch is being written
        if pipeline._lock.locked():
            break
        await asyncio.sleep(0)
    assert pipeline._lock.locked(), "a lone item waited instead of being written at once"
    # These arrive while that write is in flight (its end runs on this loop, which has not had
    # a turn since): they wait for it, then go together.
    later = [asyncio.ensure_future(pipeline.process_item(page(i))) for i in range(1, 51)]
    await asyncio.wait_for(asyncio.gather(first, *later), 60)
    with pipeline.backend.conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
        inserts = int(cur.fetchone()[1])
    await pipeline.close_spider()
    return inserts, crawler.stats.get_stats()


def test_group_commit_writes_at_once_and_batches_what_arrives_meanwhile(mysql_url, mysql_query, tmp_path):
    """With the default STORAGE_FLUSH_INTERVAL (0), a lone item is written as soon as it comes
    (no timer), and the 50 items arriving during that write are the next batch: two INSERTs."""
    inserts, stats = asyncio.run(_group_commit(mysql_url, str(tmp_path)))
    assert inserts == 2
    assert stats["storage/written/pages"] == 51
    assert mysql_query("SELECT COUNT(*) FROM pages")[0][0] == 51
