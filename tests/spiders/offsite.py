"""``offsite``: a spider bound to its start URL's host (``allowed_domains``) that follows every
link, for the tests of requests Scrapy drops on the way (a redirect to another host)."""

from urllib.parse import urlsplit

import scrapy


class OffsiteSpider(scrapy.Spider):
    name = "offsite"

    def __init__(self, *args, url: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.start_urls = [url]
        self.allowed_domains = [urlsplit(url).hostname]

    def start_requests(self):  # Scrapy 2.11 and 2.12
        for url in self.start_urls:
            yield scrapy.Request(url)

    async def start(self):
        for request in self.start_requests():
            yield request

    def parse(self, response):
        yield {"url": response.url}
        yield from response.follow_all(css="a")
