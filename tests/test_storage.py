"""Storage on the real MariaDB: intact UTF-8, truncation, refusals that spare the batch, upserts."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from crawler.items import Page
from scrapy_frontier.schema import schema_of, to_row

EMOJI_TITLE = "Crawl 🕷️ report 𝄞 — ünïcödé"
BIG_TEXT = ("Lorem ipsum dolor sit amet 🐍 " * 7000)[:200_000]


@pytest.fixture
def odd_site(tmp_path):
    """A small site: an emoji page with 200 KB of text, a page with a 3000-character title and a
    normal page."""
    from tests.servers import HttpServer

    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text(
        "<html lang='en'><head><title>Index</title></head><body>"
        "<a href='emoji.html'>e</a> <a href='long-title.html'>t</a> <a href='normal.html'>n</a>"
        "</body></html>",
        encoding="utf-8",
    )
    (root / "emoji.html").write_text(
        "<html><head><meta "
        f"charset='utf-8'><title>{EMOJI_TITLE}</title></head><body><main><p>{BIG_TEXT}</p></main></body></html>",
        encoding="utf-8",
    )
    (root / "long-title.html").write_text(f"<html><head><title>{'T' * 3000}</title></head><body>t</body></html>")
    (root / "normal.html").write_text("<html><head><title>Normal</title></head><body><h1>N</h1></body></html>")
    server = HttpServer(root, "127.0.0.3")
    yield server
    server.stop()


def test_utf8mb4_big_text_truncation_and_refusal_in_a_real_crawl(
    odd_site, start_worker, mysql_url, mysql_query, tmp_path
):
    worker = start_worker(env={"MYSQL_URL": mysql_url}, args=["-a", f"url={odd_site.url}index.html"])
    assert worker.wait() == 0, worker.output[-3000:]
    rows = {
        url.removeprefix(odd_site.url): (title, text)
        for url, title, text in mysql_query("SELECT url, title, text FROM pages")
    }
    assert set(rows) == {"index.html", "emoji.html", "long-title.html", "normal.html"}
    assert rows["emoji.html"] == (EMOJI_TITLE, " ".join(BIG_TEXT.split()))
    assert len(rows["emoji.html"][1]) > 199_000
    assert rows["long-title.html"][0] == "T" * 1024
    assert "Truncated field 'title' of Page(url=" in worker.output
    assert worker.stat("validation/truncated/title") == 1


def test_invalid_item_is_dropped_counted_and_kept(start_worker, mysql_url, mysql_query, tmp_path):
    """A start URL whose URL is longer than the url column: validation refuses its Page, and the
    refusal is logged with the field, counted, and kept as JSON."""
    from tests.servers import HttpServer

    root = tmp_path / "site"
    root.mkdir()
    # a URL of about 2060 characters: over the url column (2048), under Scrapy's URLLENGTH_LIMIT (2083)
    name = "/".join(["p" * 202] * 10) + "/page.html"
    (root / name).parent.mkdir(parents=True)
    (root / name).write_text("<html><head><title>long url</title></head><body></body></html>")
    server = HttpServer(root, "127.0.0.4")
    try:
        worker = start_worker(env={"MYSQL_URL": mysql_url}, args=["-a", f"url={server.url}{name}"])
        assert worker.wait() == 0, worker.output[-3000:]
    finally:
        server.stop()
    assert mysql_query("SHOW TABLES LIKE 'pages'") == ()  # made with the first Page stored: none was
    assert worker.stat("validation/dropped/too_long") == 1
    assert "invalid field 'url' (too_long)" in worker.output
    kept = [json.loads(line) for line in (tmp_path / "site.items.invalid.jl").read_text().splitlines()]
    assert [(k["field"], k["reason"], k["item"]["title"]) for k in kept] == [("url", "too_long", "long url")]


def page_row(url: str, title: str = "t") -> tuple:
    page = Page(
        url=url, status=200, title=title, content_hash="0" * 64, fetched_at=datetime(2026, 1, 1).isoformat() + "+00:00"
    )
    return to_row(page, schema_of(Page))


def test_a_row_the_server_refuses_does_not_take_its_batch_down(backend, mysql_query):
    schema = schema_of(Page)
    rows = [page_row("http://h/1"), page_row("http://h/2", title="x" * 5000), page_row("http://h/3")]
    refused = backend.upsert(schema, rows)
    assert [i for i, _ in refused] == [1]
    assert "1406" in refused[0][1]  # ER_DATA_TOO_LONG, strict mode
    assert sorted(r[0] for r in mysql_query("SELECT url FROM pages")) == ["http://h/1", "http://h/3"]


def test_upsert_updates_in_place(backend, mysql_query):
    schema = schema_of(Page)
    assert backend.upsert(schema, [page_row("http://h/1", "old")]) == []
    assert backend.upsert(schema, [page_row("http://h/1", "new"), page_row("http://h/1", "newer")]) == []
    assert mysql_query("SELECT url, title FROM pages") == (("http://h/1", "newer"),)


def test_lost_connection_is_reported_as_retryable(backend, mysql_query):
    from scrapy_frontier.storage.backends import ConnectionLost

    schema = schema_of(Page)
    conn_id = backend.conn.thread_id()
    mysql_query(f"KILL {conn_id}")
    with pytest.raises(ConnectionLost):
        backend.upsert(schema, [page_row("http://h/9")])
    # the next call reconnects and the batch goes through
    assert backend.upsert(schema, [page_row("http://h/9")]) == []
    assert mysql_query("SELECT COUNT(*) FROM pages")[0][0] == 1


def test_a_dropped_sqlite_table_is_created_again(tmp_path, caplog):
    """SQLite's ``no such table`` as MySQL's 1146: the table comes back and the batch is written."""
    import sqlite3

    from scrapy_frontier.storage.backends import SQLiteBackend

    path = tmp_path / "crawl.sqlite3"
    backend = SQLiteBackend(str(path))
    backend.connect()
    schema = schema_of(Page)
    backend.ensure_table(schema)
    assert backend.upsert(schema, [page_row("http://h/1")]) == []
    other = sqlite3.connect(path)
    other.execute("DROP TABLE pages")
    other.commit()
    assert backend.upsert(schema, [page_row("http://h/2"), page_row("http://h/3")]) == []
    assert sorted(r[0] for r in other.execute("SELECT url FROM pages")) == ["http://h/2", "http://h/3"]
    assert [r.levelname for r in caplog.records if "is missing" in r.getMessage()] == ["WARNING"]
    other.close()
    backend.close()
