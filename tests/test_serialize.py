import json

import pytest
from scrapy import Request, Spider

from scrapy_frontier.serialize import (
    RequestRefused,
    parse_start_payload,
    request_from_json,
    request_to_json,
)


class S(Spider):
    name = "s"

    def parse(self, response):
        pass

    def other(self, response):
        pass

    def on_error(self, failure):
        pass

    @staticmethod
    def helper(response):
        pass


def foreign(response):
    pass


@pytest.fixture
def spider():
    return S()


def test_round_trip_keeps_everything(spider):
    request = Request(
        "http://h/p?q=1",
        method="POST",
        headers={"X-A": "1", "Cookie": "c=\xe9"},
        body=b"\x00\xffraw",
        meta={"depth": 2, "k": [1, "é"]},
        cb_kwargs={"x": 1},
        priority=5,
        callback=spider.other,
        errback=spider.on_error,
        dont_filter=True,
    )
    back = request_from_json(request_to_json(request, spider), spider)
    assert (back.url, back.method, back.body, back.priority, back.dont_filter) == (
        request.url,
        "POST",
        b"\x00\xffraw",
        5,
        True,
    )
    assert back.headers.getlist("X-A") == [b"1"]
    assert back.headers.getlist("Cookie") == request.headers.getlist("Cookie")
    assert back.meta == {"depth": 2, "k": [1, "é"]}
    assert back.cb_kwargs == {"x": 1}
    assert back.callback == spider.other and back.errback == spider.on_error


def test_private_meta_is_not_stored(spider):
    payload = request_to_json(Request("http://h/", meta={"_frontier_lease": b"x", "a": 1}), spider)
    assert json.loads(payload)["meta"] == {"a": 1}


def test_foreign_callback_is_refused_at_enqueue(spider):
    with pytest.raises(RequestRefused, match="not a method of spider"):
        request_to_json(Request("http://h/", callback=foreign), spider)


def test_meta_that_is_not_json_is_refused(spider):
    with pytest.raises(RequestRefused) as info:
        request_to_json(Request("http://h/", meta={"obj": object()}), spider)
    assert info.value.reason == "not_json"


def parse(raw, spider, limit=65536):
    return parse_start_payload(raw if isinstance(raw, bytes) else raw.encode(), spider, limit)


def test_plain_url_and_json_string(spider):
    assert parse("  http://h/a  ", spider)[0].url == "http://h/a"
    assert parse('"http://h/b"', spider)[0].url == "http://h/b"


def test_json_object_fields(spider):
    raw = json.dumps(
        {
            "url": "http://h/",
            "meta": {"probe": 1},
            "method": "POST",
            "body": "a=1",
            "priority": 3,
            "callback": "other",
            "cb_kwargs": {"x": 2},
            "formdata": {"a": "b"},
        }
    )
    request, unknown = parse(raw, spider)
    assert (request.method, request.body, request.priority, request.meta["probe"], request.cb_kwargs) == (
        "POST",
        b"a=1",
        3,
        1,
        {"x": 2},
    )
    assert request.callback == spider.other
    assert unknown == ["formdata"]
    assert type(request) is Request  # never a FormRequest


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not a url", "bad_url"),
        ('{"url": "ftp://x"}', "bad_scheme"),
        ('{"url": "file:///etc/passwd"}', "bad_scheme"),
        ("[1,2]", "not_object"),
        ("123", "not_object"),
        (b"\xff\xfe\x00http", "not_utf8"),
        ('{"url": "http://h/", "callback": "_private"}', "bad_field"),
        ('{"url": "http://h/", "callback": "nope"}', "bad_field"),
        (
            '{"url": "http://h/", "callback": "helper"}',
            "bad_field",
        ),  # a static method: a queued request could not name it
        ('{"url": "http://h/", "priority": "high"}', "bad_field"),
        ('{"url": "http://h/", "meta": [1]}', "bad_field"),
        ('{"url": ', "bad_json"),
        ("127.0.0.5:8085/library/os.html", "bad_url"),  # a URL without its scheme, not broken JSON
        ("127.0.0.5/x", "bad_url"),
        ("http://256.1.1.1/", "bad_url"),  # not an address: a resolver would look it up in DNS
        ("http://127.0.0.01/", "bad_url"),
        ("http://1.2.3/", "bad_url"),
        ("http://10.0.0.1.5/", "bad_url"),
        ('{"url": "http://h/", "meta": {"depth": "x"}}', "bad_field"),
        ('{"url": "http://h/", "meta": {"download_timeout": "abc"}}', "bad_field"),
        ('{"url": "http://h/", "meta": {"dont_retry": 1}}', "bad_field"),
        ('"http://h/\\udcff"', "bad_url"),
        ('{"meta": {}}', "bad_url"),
        ("http://", "bad_url"),
        ("http://exa mple.com/", "bad_url"),
        ("http://a<b/", "bad_url"),
        ("http://user:s3cretpw@h/p", "bad_url"),
        ('{"url": "http://:s3cretpw@h/p"}', "bad_url"),
        ("http://h/" + "a" * 2075, "bad_url"),
        ('{"url": "http://h/", "meta": {"download_timeout": -5}}', "bad_field"),
        ('{"url": "http://h/", "meta": {"depth": -1}}', "bad_field"),
        ('{"url": "http://h/", "callback": "start"}', "bad_field"),
        ('{"url": "http://h/", "meta": {"download_timeout": NaN}}', "bad_json"),  # Python reads it, JSON has none
        ('{"url": "http://h/", "meta": {"download_timeout": Infinity}}', "bad_json"),
        ('{"url": "http://h/", "meta": {"x": 1e999}}', "bad_json"),
        ('{"url": "http://h/", "headers": {"A": {"b": 1}}}', "bad_field"),  # Scrapy would send "A: b"
        ('{"url": "http://h/", "headers": {"A": 1.5}}', "bad_field"),
        ('{"url": "http://h/", "headers": {"A": [{"b": 1}]}}', "bad_field"),
        ('{"url": "http://h/", "priority": 99999999999999999999999}', "bad_field"),
        # deeper than Python's JSON parser goes (RecursionError): refused by workers and push alike
        ('{"url": "http://h/", "meta": {"x": ' + "[" * 30_000 + "]" * 30_000 + "}}", "bad_payload"),
    ],
)
def test_bad_payloads_are_refused_with_a_reason(spider, raw, reason):
    with pytest.raises(RequestRefused) as info:
        parse(raw, spider)
    assert info.value.reason == reason
    assert "s3cretpw" not in str(info.value)


def test_the_longest_url_accepted_is_scrapys_limit(spider):
    assert parse("http://h/" + "a" * 2074, spider)[0].url.endswith("a" * 2074)  # 2083 characters


def test_oversized_payload_is_refused_before_parsing(spider):
    with pytest.raises(RequestRefused) as info:
        parse(b"http://h/" + b"a" * 10_000_000, spider)
    assert info.value.reason == "too_large"


def test_a_request_subclass_keeps_its_class_and_attributes(spider):
    from scrapy.http import JsonRequest

    request = JsonRequest(
        "http://h/api", data={"b": 1, "a": 2}, dumps_kwargs={"sort_keys": True}, callback=spider.other
    )
    back = request_from_json(request_to_json(request, spider), spider)
    assert type(back) is JsonRequest and back.dumps_kwargs == {"sort_keys": True}
    assert back.body == request.body and back.method == "POST" and back.callback == spider.other


def test_only_what_differs_from_the_defaults_is_written(spider):
    assert json.loads(request_to_json(Request("http://h/"), spider)) == {"url": "http://h/"}


def test_a_refusal_names_the_key(spider):
    with pytest.raises(RequestRefused, match="meta key 'handle' holds a object") as refused:
        request_to_json(Request("http://h/", meta={"ok": 1, "handle": object()}), spider)
    assert refused.value.reason == "not_json"
    with pytest.raises(RequestRefused, match="cb_kwargs key 'when'") as refused:
        request_to_json(Request("http://h/", callback=spider.parse, cb_kwargs={"when": {1, 2}}), spider)
    with pytest.raises(RequestRefused, match="is not a method of spider 's'") as refused:
        request_to_json(Request("http://h/", callback=lambda r: None), spider)
    assert refused.value.reason == "callback"


def test_a_port_out_of_range_is_refused_not_raised():
    from scrapy_frontier.serialize import RequestRefused, check_url

    for url in ("http://127.0.0.60:99999/", "http://h:-1/", "http://h:port/"):
        with pytest.raises(RequestRefused) as exc:
            check_url(url)
        assert exc.value.reason == "bad_url" and url[:12] in str(exc.value)
