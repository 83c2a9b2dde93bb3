"""The ``broad`` spider, for the benchmark only: the ``site`` spider's parsing and items, following
links to every host of the broad benchmark site (127.1.x.y, bench/broad.py) instead of only the
start URL's host, so that one start URL spreads the crawl over every host.

Select it with ``-s SPIDER_MODULES=bench.broad_spider`` (plain Scrapy and this project alike):
the same spider, settings and site for every row, only the scheduler differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urlsplit

from scrapy.http import HtmlResponse

from crawler.spiders.site import SiteSpider

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Hosts of the broad benchmark site start with this.
HOST_PREFIX = "127.1."


class BroadSpider(SiteSpider):
    name = "broad"

    def parse(self, response: Any) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            return
        links = list(dict.fromkeys(urldefrag(link.url)[0] for link in self._links.extract_links(response)))
        yield self.page(response, links)
        for url in links:
            if (urlsplit(url).hostname or "").startswith(HOST_PREFIX):
                yield response.follow(url, callback=self.parse)
