"""The site spider's parsing, on a page of the python3.11-doc site recorded with scrapy-mock
(tests/fixtures/cassettes; CI=true replays without any HTTP)."""

import pytest

from crawler.items import Page
from crawler.spiders.site import HOSTS_META, SiteSpider
from scrapy_frontier.schema import validate


@pytest.fixture
def url():
    return "http://127.0.0.2:8931/library/json.html"


def test_page_item_from_a_real_page(response):
    spider = SiteSpider(url="http://127.0.0.2:8931/index.html")
    output = list(spider.parse(response))
    pages = [o for o in output if isinstance(o, Page)]
    assert len(pages) == 1
    page = pages[0]
    assert validate(page) == []
    assert page["url"] == page["final_url"] == "http://127.0.0.2:8931/library/json.html"
    assert page["title"].startswith("json — JSON encoder and decoder")
    assert page["language"] == "en"
    # no permalink sign, no sidebar heading ("Table of Contents", "This Page", "Navigation")
    assert page["headings"][:2] == [[1, "json — JSON encoder and decoder"], [2, "Basic Usage"]]
    assert {"Table of Contents", "This Page", "Navigation"}.isdisjoint(text for _, text in page["headings"])
    assert "¶" not in page["text"]
    assert "JSON (JavaScript Object Notation)" in page["text"]
    assert len(page["content_hash"]) == 64 and page["depth"] == 0
    assert "http://127.0.0.2:8931/library/pickle.html" in page["links"]
    assert all("#" not in link for link in page["links"])
    follow = [o for o in output if not isinstance(o, Page)]
    assert follow and all(r.url.startswith("http://127.0.0.2:8931/") for r in follow)
    assert all(r.meta[HOSTS_META] == ["127.0.0.2"] for r in follow)
    assert len({r.url for r in follow}) == len(follow)
    # links to other hosts are listed on the page but not followed
    external = [link for link in page["links"] if not link.startswith("http://127.0.0.2:8931/")]
    assert external and not set(external) & {r.url for r in follow}


def test_a_start_urls_fragment_is_not_stored_as_part_of_the_url():
    from scrapy import Request
    from scrapy.http import HtmlResponse

    request = Request("http://h.example/a.html#section")
    response = HtmlResponse(
        request.url, request=request, body=b"<html><head><title>a</title></head><body>a</body></html>"
    )
    page = SiteSpider.page(response, [])
    assert page["url"] == page["final_url"] == "http://h.example/a.html"
