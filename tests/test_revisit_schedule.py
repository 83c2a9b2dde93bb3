"""The revisit schedule's packed layout (lua/lib/revisit_wheel.lua): records in buckets by due
time, turned back into their requests when due, on a real Redis."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
import redis.asyncio
from scrapy import Request
from scrapy.http import Response
from scrapy.settings import Settings
from scrapy.spiders import Spider

from scrapy_frontier.frontier import Frontier
from scrapy_frontier.keys import Keys
from scrapy_frontier.payload import expand_payload
from scrapy_frontier.revisit import (
    REVISIT_META,
    STATE_MARK,
    _etag,
    _http_date,
    add_validators,
    read_schedule,
    schedule_args,
    supersede,
)
from scrapy_frontier.scripts import source
from scrapy_frontier.serialize import request_from_json, request_to_json

KEYS = Keys.for_spider(Settings(), "wheel")
SHARD = KEYS.shard(0)


class _Spider(Spider):
    name = "wheel"

    def parse(self, response):
        pass

    def parse_page(self, response):
        pass


SPIDER = _Spider()
STATE = {
    "interval": 86400.0,
    "first_seen": 1796400000,
    "changed_at": 1796450000,
    "changes": 3,
    "hash": "0123456789abcdef",
    "etag": 'W/"a\\b"',
    "last_modified": 1796300000,
}


def revisit(request: Request, host: str, seconds: float, state: dict, fp: str | None = None) -> tuple[str, list]:
    """``request``'s revisit as the scheduler writes it."""
    marked = request.replace(meta={**request.meta, REVISIT_META: STATE_MARK})
    fingerprint = fp or hashlib.sha1(request.url.encode()).hexdigest()
    args = schedule_args(request_to_json(marked, SPIDER), host, str(-request.priority), fingerprint, seconds, 0, state)
    return host, args


def queued(sync) -> dict[str, list[bytes]]:
    """The payloads in each host's queue lists, by host."""
    out: dict[str, list[bytes]] = {}
    for key in sync.scan_iter(match=SHARD.queue_prefix + "*#*"):
        host = key.decode()[len(SHARD.queue_prefix) :].rsplit("#", 1)[0]
        out.setdefault(host, []).extend(expand_payload(p, host.encode()) for p in sync.lrange(key, 0, -1))
    return out


def run(redis_url: str, steps):
    async def go():
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return await steps(Frontier(client, KEYS, "n1"))
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_due_revisit_is_queued_as_the_request_it_was_with_its_state(redis_url, redis_client):
    """URL forms the queue stores compact or not, a callback, headers, priority, meta: each
    revisit comes back from its record as the same request, its state in meta, and gets its
    validators as conditional headers."""
    requests = [
        (Request("https://example.com/a?q=%C3%A4&b=1#frag", meta={"depth": 2}), "example.com"),
        (Request("http://127.0.0.2:8080/p/1", callback=SPIDER.parse_page, priority=5), "127.0.0.2"),
        (Request("http://[::1]:8081/x", headers={"X-Mine": "1"}, meta={"k": [1, "two"]}), "::1"),
        (Request("https://example.com/b"), "example.com"),
    ]
    states = [STATE, {**STATE, "etag": None, "last_modified": None, "changed_at": None, "changes": 0}]

    async def steps(frontier):
        await frontier.schedule([revisit(r, host, 0.05, states[i % 2]) for i, (r, host) in enumerate(requests)])
        await asyncio.sleep(0.1)
        return await frontier.queue_due(100)

    moved, next_in = run(redis_url, steps)
    assert (moved, next_in) == (4, -1.0)
    raw = {json.loads(p)["url"]: p for ps in queued(redis_client).values() for p in ps}
    by_url = {url: json.loads(p) for url, p in raw.items()}
    for i, (request, _) in enumerate(requests):
        back = by_url[request.url]
        state = back["meta"].pop(REVISIT_META)
        if not back["meta"]:
            del back["meta"]
        assert state.pop("scheduled") > 0
        want = {k: states[i % 2][k] for k in STATE}
        assert state == want, (state, want)
        assert back == json.loads(request_to_json(request, SPIDER))
    rebuilt = request_from_json(raw["https://example.com/a?q=%C3%A4&b=1#frag"], SPIDER)
    assert add_validators(rebuilt)
    assert rebuilt.headers[b"If-None-Match"] == b'W/"a\\b"'
    assert rebuilt.headers[b"If-Modified-Since"] == b"Thu, 03 Dec 2026 12:13:20 GMT"
    assert not add_validators(request_from_json(raw["https://example.com/b"], SPIDER))
    assert redis_client.hget(SHARD.revisit_meta, "n") == b"0"
    assert not redis_client.zcard(SHARD.revisit_wheel)
    assert not list(redis_client.scan_iter(match=SHARD.revisit + "b:*"))


@pytest.mark.parametrize("seconds", [0.2, 3.0, 61.0, 86400.0, 300 * 86400.0])
def test_a_page_is_never_due_early_and_late_by_at_most_a_64th_of_its_interval(redis_url, redis_client, seconds):
    def ms() -> int:
        s, us = redis_client.time()
        return s * 1000 + us // 1000

    async def steps(frontier):
        before = ms()
        await frontier.schedule([revisit(Request("https://example.com/a"), "example.com", seconds, STATE)])
        return before, ms()

    before, after = run(redis_url, steps)
    [(_, ends, _)] = read_schedule(redis_client, KEYS)
    assert before + seconds * 1000 <= ends <= after + seconds * 1000 * (1 + 1 / 64) + 1, (before, ends, after)


def test_many_pages_fill_parts_of_at_most_8_kb_and_leave_nothing_when_moved(redis_url, redis_client):
    pages = [
        revisit(Request(f"https://example.com/article/{i}.html"), "example.com", 0.3, STATE, f"{i:016x}" + "0" * 24)
        for i in range(2000)
    ]

    async def steps(frontier):
        for i in range(0, len(pages), 300):
            await frontier.schedule(pages[i : i + 300])
        sizes = [
            redis_client.strlen(SHARD.revisit + "b:" + p.decode())
            for p in redis_client.zrange(SHARD.revisit_wheel, 0, -1)
        ]
        scheduled = redis_client.hget(SHARD.revisit_meta, "n")
        await asyncio.sleep(0.35)
        moved = 0
        while True:
            n, _ = await frontier.queue_due(500)
            if not n:
                return sizes, scheduled, moved
            moved += n

    sizes, scheduled, moved = run(redis_url, steps)
    assert scheduled == b"2000" and moved == 2000
    assert len(sizes) >= 2000 * 60 // 8176 and max(sizes) <= 8176, sizes
    assert len(queued(redis_client)["example.com"]) == 2000
    assert not list(redis_client.scan_iter(match=SHARD.revisit + "b:*"))
    assert redis_client.hgetall(SHARD.revisit_meta) == {b"n": b"0"}


def test_a_second_record_of_a_page_due_within_the_window_is_a_duplicate(redis_url, redis_client):
    """A page scheduled twice (its worker died between scheduling it and acknowledging its
    fetch, which was fetched and scheduled again) is queued once."""
    page = revisit(Request("https://example.com/a"), "example.com", 0.05, STATE, "ab" * 20)

    async def steps(frontier):
        await frontier.schedule([page])
        await asyncio.sleep(0.02)
        await frontier.schedule([page])
        await asyncio.sleep(0.1)
        first = await frontier.queue_due(100, window=5)
        await frontier.schedule([page])
        await asyncio.sleep(0.1)
        return first, await frontier.queue_due(100, window=5)

    assert run(redis_url, steps) == ((1, -1.0), (0, -1.0))
    assert len(queued(redis_client)["example.com"]) == 1


def test_templates_whose_ids_clash_each_get_their_own(redis_url, redis_client):
    a = revisit(Request("https://a.example/x"), "a.example", 0.05, STATE)
    b = revisit(Request("https://b.example/y", meta={"depth": 1}), "b.example", 0.05, STATE)
    b[1][3] = a[1][3]  # the same id proposed

    async def steps(frontier):
        await frontier.schedule([a, b])
        await asyncio.sleep(0.1)
        return await frontier.queue_due(100)

    assert run(redis_url, steps)[0] == 2
    assert redis_client.hlen(SHARD.revisit_templates) == 2
    got = queued(redis_client)
    assert json.loads(got["a.example"][0])["url"] == "https://a.example/x"
    assert json.loads(got["b.example"][0])["meta"]["depth"] == 1


def test_the_schedule_of_the_former_layout_is_drained_as_it_comes_due(redis_url, redis_client):
    """A crawl scheduled by the version that kept each page in a sorted set and a hash: its
    pages are counted and queued when due, beside the wheel's."""
    old = '{"url":"https://old.example/p","meta":{"revisit":{"interval":60.0}},"dont_filter":true}'
    f1, f2, f3 = ("ab" * 20, "cd" * 20, "ef" * 20)
    redis_client.zadd(SHARD.revisit_due, {f1: 0, f2: 2_000_000_000_000, f3: 0})
    redis_client.hset(SHARD.revisit_requests, mapping={f: f"old.example\t0\t{old}" for f in (f1, f2, f3)})
    supersede(redis_client, KEYS, {0: [f3]})  # scrapy forget
    count = redis_client.register_script(source("revisit_count"))
    assert count(keys=[SHARD.revisit_wheel, SHARD.revisit_meta, SHARD.revisit_due])[:2] == [3, 2]

    async def steps(frontier):
        await frontier.schedule([revisit(Request("https://new.example/p"), "new.example", 0.05, STATE)])
        await asyncio.sleep(0.1)
        return await frontier.queue_due(100)

    moved, next_in = run(redis_url, steps)
    assert moved == 2 and next_in > 1e6
    assert set(queued(redis_client)) == {"old.example", "new.example"}
    assert count(keys=[SHARD.revisit_wheel, SHARD.revisit_meta, SHARD.revisit_due])[:2] == [1, 0]


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (b'"abc-1"', '"abc-1"'),
        (b'W/"x"', 'W/"x"'),
        ('"caf\u00e9"'.encode("latin-1"), None),
        (b'"' + b"a" * 300 + b'"', None),
    ],
)
def test_an_etag_the_schedule_cannot_keep_is_left_out(value, kept):
    response = Response("https://example.com/", headers={"ETag": value})
    assert _etag(response) == kept


def test_last_modified_is_kept_in_seconds_and_an_unreadable_one_is_left_out():
    assert _http_date(b"Thu, 03 Dec 2026 12:13:20 GMT") == 1796300000
    assert _http_date(b"yesterday") is None and _http_date(None) is None


def test_a_revisit_leaves_out_the_headers_each_download_sets_afresh():
    """Its parent page's ``Referer`` and the jar's ``Cookie`` would give each page a template of
    its own; the spider's own headers stay, and validators are put in only when it is taken."""
    from scrapy.http import HtmlResponse
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.revisit import REVISIT_IN_META, RevisitMiddleware

    crawler = get_crawler(_Spider, {"REDIS_URL": "redis://127.0.0.1:1/0", "REVISIT_INTERVAL": 60})
    crawler.spider = crawler._create_spider()
    middleware = RevisitMiddleware.from_crawler(crawler)
    request = Request(
        "https://example.com/a",
        headers={"Referer": "https://example.com/", "Cookie": "s=1", "X-Mine": "1", "If-None-Match": '"old"'},
    )
    response = HtmlResponse(request.url, body=b"<html><title>t</title><p>text</p></html>", request=request)
    response.headers[b"ETag"] = b'"v1"'
    [revisit] = list(middleware.process_spider_output(response, []))
    assert set(revisit.headers) == {b"X-Mine"}
    assert revisit.meta[REVISIT_IN_META] == (60.0, 0)
    assert revisit.meta[REVISIT_META]["etag"] == '"v1"'


@pytest.mark.parametrize(
    "state",
    [
        {"interval": -5, "etag": "\u00e9\r\nX-Injected: 1", "changes": -3},
        {"interval": "soon", "first_seen": "yesterday", "hash": "zz", "last_modified": [1]},
        "not a dict",
        {"interval": float("nan"), "first_seen": 2**40, "scheduled": "x"},
    ],
)
def test_a_revisit_state_that_does_not_fit_is_left_out_not_a_traceback(state):
    """A start URL's payload may carry any ``meta["revisit"]``: the page is fetched, stored and
    scheduled; no validator it cannot keep is sent, no count wraps around."""
    from scrapy.http import HtmlResponse
    from scrapy.utils.test import get_crawler

    from scrapy_frontier.revisit import REVISIT_IN_META, RevisitMiddleware, read_state

    crawler = get_crawler(_Spider, {"REDIS_URL": "redis://127.0.0.1:1/0", "REVISIT_INTERVAL": 60})
    middleware = RevisitMiddleware.from_crawler(crawler)
    request = Request("https://example.com/a", meta={REVISIT_META: state})
    assert not add_validators(request)
    response = HtmlResponse(request.url, body=b"<html><title>t</title><p>text</p></html>", request=request)
    [revisit] = list(middleware.process_spider_output(response, []))
    seconds, _ = revisit.meta[REVISIT_IN_META]
    kept = read_state(revisit.meta[REVISIT_META])
    assert seconds == 60 and kept["interval"] == 60 and kept["changes"] in (0, 1) and kept["first_seen"] > 0
    assert schedule_args(
        json.dumps({"url": revisit.url, "meta": {"revisit": STATE_MARK}}, separators=(",", ":")),
        "example.com",
        "0",
        "ab" * 20,
        60,
        0,
        kept,
    )


def test_the_crawl_list_counts_the_packed_schedule(redis_url, redis_client):
    """``scrapy status`` without a spider says ``revisiting`` (or ``stalled``) from this count."""
    from scrapy_frontier.commands.status import crawl_state, scheduled_revisits

    pages = [revisit(Request(f"https://example.com/{i}"), "example.com", 60, STATE) for i in range(3)]
    run(redis_url, lambda frontier: frontier.schedule(pages))
    assert scheduled_revisits(redis_client, KEYS) == 3
    assert crawl_state(True, 1, 3) == "revisiting"
