"""Spiders written for a Scrapy before 2.13, for tests/test_scrapy_versions.py: ``legacy`` (a
``start_requests()`` and no ``start()``, with a spider middleware that has only
``process_start_requests()``) and ``rules`` (a ``CrawlSpider`` whose start page its own rule
reaches again from the pages it links to)."""

from urllib.parse import urlsplit

import scrapy
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class TagStartMiddleware:
    """A spider middleware of the pre-2.13 kind: ``process_start_requests()`` only."""

    def process_start_requests(self, start_requests, spider):
        for request in start_requests:
            request.meta["tagged"] = True
            yield request


class LegacySpider(scrapy.Spider):
    name = "legacy"
    custom_settings = {"SPIDER_MIDDLEWARES": {TagStartMiddleware: 500}}

    def __init__(self, *args, url="", **kwargs):
        super().__init__(*args, **kwargs)
        self.start_url = url
        self.links = LinkExtractor(allow_domains=[urlsplit(url).netloc])

    def start_requests(self):
        yield scrapy.Request(self.start_url)

    def parse(self, response):
        if isinstance(response, HtmlResponse):
            yield {"url": response.url, "tagged": response.meta.get("tagged", False)}
            yield from (scrapy.Request(link.url) for link in self.links.extract_links(response))


class RulesSpider(CrawlSpider):
    name = "rules"

    def __init__(self, *args, url="", **kwargs):
        self.start_urls = [url]
        links = LinkExtractor(allow=r"/tutorial/", allow_domains=[urlsplit(url).netloc])
        self.rules = (Rule(links, callback="parse_page", follow=True),)
        super().__init__(*args, **kwargs)

    def parse_page(self, response):
        yield {"url": response.url}
