"""``kinds``: yields items of every kind ItemAdapter supports for each start URL (``-a urls=``,
separated by white space), for the storage tests: a dataclass and an attrs class with a schema
(:mod:`tests.items`), and items without one: dicts, a dataclass, an attrs class."""

from __future__ import annotations

from dataclasses import dataclass

import attrs
import scrapy

from tests.items import Article, Heading


@dataclass
class Note:
    """No schema: stored as a document, keyed by its content (it has no ``url``)."""

    page: str
    size: int


@attrs.define
class Tag:
    """No schema: stored as a document."""

    name: str


class KindsSpider(scrapy.Spider):
    name = "kinds"

    def __init__(self, *args, urls: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.start_urls = urls.split()

    def start_requests(self):  # Scrapy 2.11 and 2.12
        for url in self.start_urls:
            yield scrapy.Request(url)

    async def start(self):
        for request in self.start_requests():
            yield request

    def parse(self, response):
        title = response.xpath("normalize-space(//title)").get()
        yield Article(
            url=response.url, title=title, words=len(" ".join(response.xpath("//body//text()").getall()).split())
        )
        yield Heading(anchor=response.url + "#h1", level=1, text=response.xpath("normalize-space(//h1)").get())
        yield {"url": response.url, "title": title, "status": response.status}
        yield {"kind": "the same for every page"}
        yield Note(page=response.url, size=len(response.body))
        yield Tag(name=response.url.rsplit("/", 1)[-1].removesuffix(".html"))
