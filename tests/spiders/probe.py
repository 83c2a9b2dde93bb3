"""``probe``: fetches each start URL and reports what arrived, for tests of start-URL payloads."""

import scrapy


class ProbeSpider(scrapy.Spider):
    name = "probe"

    def parse(self, response):
        request = response.request
        yield {
            "url": response.url,
            "probe": response.meta.get("probe"),
            "method": request.method,
            "body": request.body.decode("latin-1"),
            "status": response.status,
        }

    def other(self, response, extra=None):
        yield {"url": response.url, "callback": "other", "extra": extra}
