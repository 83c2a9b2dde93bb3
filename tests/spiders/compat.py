"""Spiders written as scrapy-redis users write them, for the scrapy-redis compatibility tests
(``tests/test_compat.py``): ``compat_redis`` (a ``RedisSpider`` whose ``redis_key``,
``redis_encoding`` and ``max_idle_time`` are set in ``__init__``, with ``allowed_domains`` that
its pushed URLs are outside of, and a ``next_requests`` of its own), ``compat_plain`` (a
``CrawlSpider`` with ``start_urls``, as scrapy-redis's example ``dmoz``), ``compat_bad`` (a
``redis_key`` that is a list) and ``compat_bad_redis`` (the same on a ``RedisSpider``, whose own
``setup_redis`` cannot expand it)."""

from urllib.parse import urlsplit

from scrapy import Spider
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule
from scrapy_redis.spiders import RedisSpider


class CompatRedisSpider(RedisSpider):
    name = "compat_redis"

    def __init__(self, *args, key="", encoding="", max_idle="", **kwargs):
        self.allowed_domains = ["allowed.example"]
        if key:
            self.redis_key = key
        if encoding:
            self.redis_encoding = encoding
        if max_idle:
            self.max_idle_time = int(max_idle)
        super().__init__(*args, **kwargs)

    def next_requests(self):  # scrapy-redis's own reading: never called here
        return super().next_requests()

    def parse(self, response):
        yield {"url": response.url}


class CompatPlainSpider(CrawlSpider):
    name = "compat_plain"
    rules = (Rule(LinkExtractor(allow=r"/tutorial/"), callback="parse_page", follow=True),)

    def __init__(self, *args, url="", **kwargs):
        super().__init__(*args, **kwargs)
        self.start_urls = [url]
        self.allowed_domains = [urlsplit(url).hostname]

    def parse_start_url(self, response):
        return self.parse_page(response)

    def parse_page(self, response):
        yield {"url": response.url}


class CompatBadSpider(Spider):
    name = "compat_bad"
    redis_key = ["compat_bad:high", "compat_bad:low"]


class CompatBadRedisSpider(RedisSpider):
    name = "compat_bad_redis"
    redis_key = ["compat_bad_redis:high", "compat_bad_redis:low"]
