from pathlib import Path

import pytest

import crawler.items
from crawler.items import Page
from scrapy_frontier.schema import ValidationError, schema_of, to_row, validate
from scrapy_frontier.storage.ddl import schema_sql

ROOT = Path(__file__).resolve().parent.parent


def page(**kw):
    base = dict(url="http://h/x", status=200, content_hash="a" * 64, fetched_at="2026-11-29T10:00:00+00:00")
    base.update(kw)
    return Page(**base)


def test_valid_page_passes_unchanged():
    item = page(title="T", headings=[[1, "H"]])
    assert validate(item) == []
    assert item["title"] == "T"


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"url": None}, "url", "missing"),
        ({"url": ""}, "url", "missing"),
        ({"status": "200"}, "status", "type"),
        ({"status": True}, "status", "type"),
        ({"url": "http://h/" + "x" * 2100}, "url", "too_long"),
        ({"url": "http://h/é"}, "url", "not_ascii"),
        ({"fetched_at": "yesterday"}, "fetched_at", "bad_datetime"),
        ({"fetched_at": "2026-11-29T10:00:00"}, "fetched_at", "bad_datetime"),
        ({"headings": "h1"}, "headings", "type"),
    ],
)
def test_invalid_pages_name_field_and_reason(fields, field, reason):
    with pytest.raises(ValidationError) as info:
        validate(page(**fields))
    assert (info.value.field, info.value.reason) == (field, reason)


def test_long_title_is_truncated_to_its_column():
    item = page(title="é" * 5000)
    assert validate(item) == ["title"]
    assert item["title"] == "é" * 1024


def test_row_serializes_lists_and_utc_datetimes():
    item = page(links=["http://h/é"], fetched_at="2026-11-29T11:00:00+01:00")
    row = dict(zip(schema_of(Page).columns, to_row(item, schema_of(Page))))
    assert row["links"] == '["http://h/é"]'
    assert row["fetched_at"].isoformat() == "2026-11-29T10:00:00"


def test_deploy_schema_matches_the_items():
    assert (ROOT / "deploy" / "schema.sql").read_text() == schema_sql(crawler.items), (
        "regenerate it as docs/items.md says"
    )


def test_an_item_without_a_schema_must_hold_json_values():
    from scrapy_frontier.schema import ValidationError, validate

    assert validate({"url": "http://h/", "n": 1, "tags": ["a"]}) == []
    with pytest.raises(ValidationError, match="holds a object") as refused:
        validate({"url": "http://h/", "handle": object()})
    assert (refused.value.field, refused.value.reason) == ("handle", "not_json")
